// tokenizer_spm.cc — the extern "C" shim over libsentencepiece's C++ API (dt_spm.h).
//
// libsentencepiece reports failures as util::Status (no exceptions); the only exceptions
// that can leave its calls are the standard library's (std::bad_alloc from a vector or a
// string), so every entry point catches them and turns them into DT_ENOMEM / DT_EINTERNAL.
extern "C" {
#include "dt_error.h"   // a C header without its own extern "C" guards
}
#include "dt_spm.h"

#include <sentencepiece_processor.h>

#include <cstdlib>
#include <cstring>
#include <new>
#include <string>
#include <vector>

struct dt_spm {
    sentencepiece::SentencePieceProcessor sp;
};

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
        auto st = m->sp.Encode(std::string_view(text, len), &v);
        if (!st.ok())
            return dt_errorf(err, DT_EINVAL, "SentencePiece encode failed: %.300s", st.ToString().c_str());
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
