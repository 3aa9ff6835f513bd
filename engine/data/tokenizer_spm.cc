// tokenizer_spm.cc — the extern "C" shim over libsentencepiece's C++ API (dt_spm.h).
//
// Unigram models are segmented here, not by the library: Debian 12's libsentencepiece
// (0.1.97) scores candidates in its Viterbi (unigram_model.cc EncodeOptimized) as
// doubles -- `length * max_score_ - 0.1` makes the ternary a double -- and compares them
// with the float scores it stored, so where two segmentations tie in float ("0" + "00"
// and "00" + "0" for "000" in sentencepiece's own kyoto_ja_unigram_8000 test model) it
// keeps the other one than sentencepiece >= 0.2.0 (all floats; what pip's sentencepiece
// and transformers give). unigram_encode below is 0.2.3's EncodeOptimized, the same float
// arithmetic step for step (score reset past 1e5 included); the normalized text it works
// on is the library's (the pieces of its own encoding, concatenated), so the normalizer
// stays the library's. tests/tokenizer tokenizer_released checks it against
// sentencepiece 0.2.3 on that model. BPE models are the library's throughout.
//
// libsentencepiece reports failures as util::Status (no exceptions); the only exceptions
// that can leave its calls are the standard library's (std::bad_alloc from a vector or a
// string), so every entry point catches them and turns them into DT_ENOMEM / DT_EINTERNAL.
extern "C" {
#include "dt_error.h"   // a C header without its own extern "C" guards
}
#include "dt_spm.h"

#include <sentencepiece_processor.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <new>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

// sentencepiece_model.proto: ModelProto.pieces = 1, .trainer_spec = 2;
// SentencePiece.piece = 1, .score = 2, .type = 3; TrainerSpec.model_type = 3, .byte_fallback = 35
enum { PB_PIECES = 1, PB_TRAINER = 2, PB_PIECE = 1, PB_SCORE = 2, PB_TYPE = 3, PB_MODEL_TYPE = 3,
       PB_BYTE_FALLBACK = 35 };
enum { SPM_NORMAL = 1, SPM_UNKNOWN = 2, SPM_USER_DEFINED = 4, SPM_UNUSED = 5, SPM_MODEL_UNIGRAM = 1 };
constexpr float kUnkPenalty = 10.0f;                 // unigram_model.cc
constexpr float kScoreResetThreshold = 100000.0f;    // unigram_model.cc (0.2.x)

// What unigram_encode needs of the model, read from its ModelProto.
struct unigram_model {
    bool on = false;                                 // a Unigram model
    bool byte_fallback = false;
    std::unordered_map<std::string, int> pieces;     // NORMAL, USER_DEFINED, UNUSED (the trie's)
    size_t max_len = 0;                              // bytes of the longest of those
    std::vector<float> score;
    std::vector<uint8_t> type;
    float min_score = 0;                             // over NORMAL pieces
    int unk_id = 0;
};

struct dt_spm {
    sentencepiece::SentencePieceProcessor sp;
    unigram_model uni;
};

// ---- a minimal protobuf wire-format reader, for the few fields above ----
struct pb {
    const uint8_t *p, *end;
    bool ok = true;
    uint64_t varint() {
        uint64_t v = 0;
        for (int s = 0; s < 64 && p < end; s += 7) {
            uint8_t b = *p++;
            v |= uint64_t(b & 0x7f) << s;
            if (!(b & 0x80)) return v;
        }
        ok = false;
        return 0;
    }
    // next field: its number and wire type; false at the end or on a malformed message
    bool next(uint32_t *field, uint32_t *wire) {
        if (!ok || p >= end) return false;
        uint64_t k = varint();
        *field = uint32_t(k >> 3);
        *wire = uint32_t(k & 7);
        return ok;
    }
    std::string_view bytes() {
        uint64_t n = varint();
        if (!ok || n > uint64_t(end - p)) { ok = false; return {}; }
        std::string_view v(reinterpret_cast<const char *>(p), size_t(n));
        p += n;
        return v;
    }
    uint32_t fixed32() {
        if (end - p < 4) { ok = false; return 0; }
        uint32_t v = uint32_t(p[0]) | uint32_t(p[1]) << 8 | uint32_t(p[2]) << 16 | uint32_t(p[3]) << 24;
        p += 4;
        return v;
    }
    void skip(uint32_t wire) {
        if (wire == 0) varint();
        else if (wire == 1) p = end - p >= 8 ? p + 8 : (ok = false, end);
        else if (wire == 2) bytes();
        else if (wire == 5) fixed32();
        else ok = false;
    }
};

static pb sub(std::string_view v) {
    const uint8_t *b = reinterpret_cast<const uint8_t *>(v.data());
    return pb{b, b + v.size()};
}

// The pieces and the trainer spec of a ModelProto the library has accepted already.
static void read_unigram(const void *bytes, size_t len, unigram_model *u) {
    pb m{static_cast<const uint8_t *>(bytes), static_cast<const uint8_t *>(bytes) + len};
    uint32_t f, w;
    int model_type = SPM_MODEL_UNIGRAM;   // the proto's default
    u->min_score = 3.402823466e38f;       // FLT_MAX, as the library starts
    while (m.next(&f, &w)) {
        if (f == PB_PIECES && w == 2) {
            pb s = sub(m.bytes());
            std::string piece;
            float score = 0;
            int type = SPM_NORMAL;
            uint32_t g, x;
            while (s.next(&g, &x)) {
                if (g == PB_PIECE && x == 2) piece = std::string(s.bytes());
                else if (g == PB_SCORE && x == 5) {
                    uint32_t b = s.fixed32();
                    std::memcpy(&score, &b, sizeof score);
                } else if (g == PB_TYPE && x == 0) type = int(s.varint());
                else s.skip(x);
            }
            int id = int(u->score.size());
            u->score.push_back(score);
            u->type.push_back(uint8_t(type));
            if (type == SPM_NORMAL) u->min_score = std::min(u->min_score, score);
            if (type == SPM_UNKNOWN) u->unk_id = id;
            if (type == SPM_NORMAL || type == SPM_USER_DEFINED || type == SPM_UNUSED) {
                u->max_len = std::max(u->max_len, piece.size());
                u->pieces.emplace(std::move(piece), id);
            }
        } else if (f == PB_TRAINER && w == 2) {
            pb t = sub(m.bytes());
            uint32_t g, x;
            while (t.next(&g, &x)) {
                if (g == PB_MODEL_TYPE && x == 0) model_type = int(t.varint());
                else if (g == PB_BYTE_FALLBACK && x == 0) u->byte_fallback = t.varint() != 0;
                else t.skip(x);
            }
        } else {
            m.skip(w);
        }
    }
    u->on = m.ok && model_type == SPM_MODEL_UNIGRAM && !u->pieces.empty();
}

// sentencepiece 0.2.3's unigram Model::EncodeOptimized on normalized text: (piece, id)
// as byte ranges [begin, end) of normalized.
struct seg {
    size_t begin, end;
    int id;
};

static std::vector<seg> unigram_viterbi(const unigram_model &u, std::string_view normalized) {
    struct best_node {
        int id = -1;
        float score = 0;
        long starts_at = -1;
    };
    const size_t size = normalized.size();
    const float unk_score = u.min_score - kUnkPenalty;
    std::vector<best_node> best(size + 1);
    size_t starts_at = 0, max_frontier = 0;
    std::string key;
    while (starts_at < size) {
        float till_here = best[starts_at].score;
        if (till_here < -kScoreResetThreshold || till_here > kScoreResetThreshold) {
            const float offset = till_here;
            for (size_t i = starts_at; i <= max_frontier; ++i)
                if (i == starts_at || best[i].starts_at != -1) best[i].score -= offset;
            till_here = 0.0f;
        }
        bool has_single_node = false;
        // util.h OneCharLen: the UTF-8 length its lead byte announces
        const size_t mblen = std::min<size_t>(
            size_t("\1\1\1\1\1\1\1\1\1\1\1\1\2\2\3\4"[(uint8_t(normalized[starts_at])) >> 4]), size - starts_at);
        for (size_t length = 1; length <= u.max_len && starts_at + length <= size; length++) {
            key.assign(normalized.data() + starts_at, length);
            auto it = u.pieces.find(key);
            if (it == u.pieces.end()) continue;
            const int id = it->second;
            if (u.type[size_t(id)] == SPM_UNUSED) continue;
            const size_t key_pos = starts_at + length;
            max_frontier = std::max(max_frontier, key_pos);
            best_node &target = best[key_pos];
            // user-defined pieces get a bonus so that they are always chosen (0.2.x GetUserDefinedScore)
            const float score = u.type[size_t(id)] == SPM_USER_DEFINED ? float(0.1 * double(length - 1))
                                                                        : u.score[size_t(id)];
            const float candidate = score + till_here;
            if (target.starts_at == -1 || candidate > target.score) {
                target.score = candidate;
                target.starts_at = long(starts_at);
                target.id = id;
            }
            if (length == mblen) has_single_node = true;
        }
        if (!has_single_node) {
            max_frontier = std::max(max_frontier, starts_at + mblen);
            best_node &target = best[starts_at + mblen];
            const float candidate = unk_score + till_here;
            if (target.starts_at == -1 || candidate > target.score) {
                target.score = candidate;
                target.starts_at = long(starts_at);
                target.id = u.unk_id;
            }
        }
        starts_at += mblen;
    }
    std::vector<seg> out;
    for (size_t ends_at = size; ends_at > 0;) {
        const best_node &n = best[ends_at];
        out.push_back(seg{size_t(n.starts_at), ends_at, n.id});
        ends_at = size_t(n.starts_at);
    }
    std::reverse(out.begin(), out.end());
    return out;
}

// The library's normalized text: its encoding's pieces concatenated (a byte-fallback
// piece <0xXX> is its byte; a run of unknown pieces is one piece holding their text).
static bool normalized_text(const dt_spm *m, std::string_view text, std::string *out) {
    auto spt = m->sp.EncodeAsImmutableProto(text);
    for (const auto &p : spt.pieces()) {
        const std::string &s = p.piece();
        if (m->sp.IsByte(int(p.id()))) {
            if (s.size() != 6) return false;   // "<0xXX>"
            out->push_back(char(std::strtoul(s.substr(3, 2).c_str(), nullptr, 16)));
        } else {
            out->append(s);
        }
    }
    return true;
}

// SentencePieceProcessor::Encode's ids for Unigram models, segmented by unigram_viterbi:
// unknown pieces become byte pieces (byte fallback) or one unknown id per run.
static bool unigram_encode(const dt_spm *m, std::string_view text, std::vector<int> *ids) {
    std::string normalized;
    if (!normalized_text(m, text, &normalized)) return false;
    const unigram_model &u = m->uni;
    bool prev_unk = false;
    char byte_piece[8];
    for (const seg &s : unigram_viterbi(u, normalized)) {
        const bool unk = s.id == u.unk_id;
        if (unk && u.byte_fallback) {
            for (size_t i = s.begin; i < s.end; i++) {
                std::snprintf(byte_piece, sizeof byte_piece, "<0x%02X>", unsigned(uint8_t(normalized[i])));
                ids->push_back(m->sp.PieceToId(byte_piece));
            }
        } else if (!(unk && prev_unk)) {
            ids->push_back(s.id);
        }
        prev_unk = unk;
    }
    return true;
}

extern "C" int dt_spm_load(const void *bytes, size_t len, const char *what, dt_spm **out,
                           dt_error *err) {
    *out = nullptr;
    try {
        dt_spm *m = new dt_spm;
        auto st = m->sp.LoadFromSerializedProto(
            std::string_view(static_cast<const char *>(bytes), len));
        if (!st.ok()) {
            delete m;
            // the protobuf parser's failure names only a source line of libsentencepiece
            std::string why = len == 0 ? std::string("the file is empty")
                              : st.ToString().find("ParseFromArray") != std::string::npos
                                  ? std::string("its bytes are not a serialized ModelProto")
                                  : "libsentencepiece: " + st.ToString();
            return dt_errorf(err, DT_EINVAL,
                             "%s: neither a tokenizer.json (it does not start with '{') nor a "
                             "SentencePiece tokenizer.model (%.300s)",
                             what, why.c_str());
        }
        read_unigram(bytes, len, &m->uni);
        *out = m;
        return DT_OK;
    } catch (const std::bad_alloc &) {
        return dt_errorf(err, DT_ENOMEM, "%s: out of memory loading the SentencePiece model", what);
    } catch (const std::exception &e) {
        return dt_errorf(err, DT_EINTERNAL, "%s: libsentencepiece failed: %.300s", what, e.what());
    }
}

extern "C" void dt_spm_free(dt_spm *m) { delete m; }

extern "C" int dt_spm_encode(const dt_spm *m, const char *text, size_t len, int32_t **ids,
                             size_t *n, dt_error *err) {
    *ids = nullptr;
    *n = 0;
    try {
        std::vector<int> v;
        if (m->uni.on) {
            if (!unigram_encode(m, std::string_view(text, len), &v))
                return dt_errorf(err, DT_EINTERNAL, "SentencePiece encode: a byte piece that is not <0xXX>");
        } else {
            auto st = m->sp.Encode(std::string_view(text, len), &v);
            if (!st.ok())
                return dt_errorf(err, DT_EINVAL, "SentencePiece encode failed: %.300s", st.ToString().c_str());
        }
        if (v.empty()) return DT_OK;
        int32_t *o = static_cast<int32_t *>(std::malloc(v.size() * sizeof *o));
        if (!o) return dt_errorf(err, DT_ENOMEM, "out of memory encoding %zu bytes", len);
        for (size_t i = 0; i < v.size(); i++) o[i] = v[i];
        *ids = o;
        *n = v.size();
        return DT_OK;
    } catch (const std::bad_alloc &) {
        return dt_errorf(err, DT_ENOMEM, "out of memory encoding %zu bytes", len);
    } catch (const std::exception &e) {
        return dt_errorf(err, DT_EINTERNAL, "libsentencepiece failed: %.300s", e.what());
    }
}

extern "C" int dt_spm_decode(const dt_spm *m, const int32_t *ids, size_t n, char **out, size_t *len,
                             dt_error *err) {
    *out = nullptr;
    if (len) *len = 0;
    try {
        std::vector<int> v(ids, ids + n);
        std::string s;
        auto st = m->sp.Decode(v, &s);
        if (!st.ok())
            return dt_errorf(err, DT_EINVAL, "SentencePiece decode failed: %.300s", st.ToString().c_str());
        char *o = static_cast<char *>(std::malloc(s.size() + 1));
        if (!o) return dt_errorf(err, DT_ENOMEM, "out of memory decoding %zu tokens", n);
        std::memcpy(o, s.data(), s.size());
        o[s.size()] = '\0';
        *out = o;
        if (len) *len = s.size();
        return DT_OK;
    } catch (const std::bad_alloc &) {
        return dt_errorf(err, DT_ENOMEM, "out of memory decoding %zu tokens", n);
    } catch (const std::exception &e) {
        return dt_errorf(err, DT_EINTERNAL, "libsentencepiece failed: %.300s", e.what());
    }
}

extern "C" int32_t dt_spm_size(const dt_spm *m) { return m->sp.GetPieceSize(); }

extern "C" const char *dt_spm_piece(const dt_spm *m, int32_t id, size_t *len) {
    const std::string &p = m->sp.IdToPiece(id);
    *len = p.size();
    return p.c_str();
}

extern "C" int32_t dt_spm_piece_id(const dt_spm *m, const char *piece) {
    try {
        // PieceToId answers unk_id for a piece it does not have: check the piece back
        int id = m->sp.PieceToId(piece);
        if (id < 0 || id >= m->sp.GetPieceSize() || m->sp.IdToPiece(id) != piece) return -1;
        return id;
    } catch (const std::exception &) {
        return -1;
    }
}

extern "C" int32_t dt_spm_eos_id(const dt_spm *m) { return m->sp.eos_id(); }
extern "C" int32_t dt_spm_bos_id(const dt_spm *m) { return m->sp.bos_id(); }
