/* test_solve.c — the MILP optimum equals exhaustive enumeration of the same
 * candidate set on many randomised instances (seeded), both for the overall
 * choice and the best of every stage; plus fixed cases: infeasibility reports
 * the smallest memory that fits (and that memory does fit), stage filters,
 * --no-offload, bad requests. */
#include <string.h>

#include "dt_memory.h"
#include "dt_model.h"
#include "dt_solve.h"
#include "dt_test.h"
#include "dt_timemodel.h"

/* xorshift64*: deterministic across platforms */
static uint64_t g_rng = 0x9E3779B97F4A7C15ULL;
static uint64_t rnd(void) {
    g_rng ^= g_rng >> 12;
    g_rng ^= g_rng << 25;
    g_rng ^= g_rng >> 27;
    return g_rng * 0x2545F4914F6CDD1DULL;
}
static int64_t pick(int64_t lo, int64_t hi) { return lo + (int64_t)(rnd() % (uint64_t)(hi - lo + 1)); }

static void base_request(dt_solve_request *rq, const char *model, const char *hw, const char *link,
                         int64_t nodes, int64_t gpn) {
    dt_error err;
    memset(rq, 0, sizeof *rq);
    dt_plan_defaults(&rq->base);
    if (dt_model_resolve(model, &rq->base.model, &err)) fprintf(stderr, "%s\n", err.msg);
    if (dt_hardware_load(hw, link, &rq->base.cluster.hw, &err)) fprintf(stderr, "%s\n", err.msg);
    rq->base.cluster.device = rq->base.cluster.hw.device;
    rq->base.cluster.nodes = nodes;
    rq->base.cluster.gpus_per_node = gpn;
    rq->base.parallel.world_size = nodes * gpn;
    rq->base.parallel.overlap_comm = 1;
    rq->base.batch.global_batch = 16 * nodes * gpn;
    rq->base.batch.seq_len = 1024;
    rq->mem_limit_bytes = rq->base.cluster.hw.device_mem_bytes;
    rq->host_limit_bytes = rq->base.cluster.hw.host_mem_bytes;
    rq->nvme_limit_bytes = rq->base.cluster.hw.nvme_bytes;
    rq->stage_mask = 0xF;
    rq->allow_offload = 1;
}

static int same_choice_value(const dt_solve_choice *a, const dt_solve_choice *b) {
    if (a->valid != b->valid || a->fits != b->fits) return 0;
    if (!a->valid) return 1;
    if (a->fits) {
        double tol = 2 * DT_SOLVE_TIME_TIE_REL * b->step_s;
        if (fabs(a->step_s - b->step_s) > tol) return 0;
        return a->mem.total == b->mem.total;
    }
    return a->mem.total == b->mem.total; /* infeasible stage: least memory */
}

static void print_choice(const char *tag, const dt_solve_choice *c) {
    fprintf(stderr, "  %s: valid %d fits %d stage %d oo %d op %d mb %lld acc %lld K %lld step %.12g mem %lld\n", tag,
            c->valid, c->fits, c->zero_stage, c->offload_optimizer, c->offload_param, (long long)c->micro_batch,
            (long long)c->grad_accum, (long long)c->ckpt_layers, c->step_s, (long long)c->mem.total);
}

int main(int argc, char **argv) {
    int n_instances = argc > 1 ? atoi(argv[1]) : 300;
    static const char *models[] = {"gpt2", "gpt2-medium", "qwen3-0.6b", "llama-tiny", "gpt2-tiny", "llama-2-7b"};
    static const char *hws[] = {"H100-SXM-80GB", "A100-40GB", "A100-80GB", "cpu", "V100-32GB", "H200"};
    static const char *links[] = {"10Gb", "25Gb", "100Gb", "200Gb", "400Gb"};
    dt_solve_result *m = malloc(sizeof *m), *e = malloc(sizeof *e);
    dt_error em, ee;
    int n_feasible = 0, n_infeasible = 0, n_stage_choices[4] = {0}, n_ckpt = 0, n_offload = 0, n_mismatch = 0;
    for (int it = 0; it < n_instances; it++) {
        dt_solve_request rq;
        int64_t nodes = pick(1, 2), gpn = (int64_t)1 << pick(0, 3);
        int hwi = (int)pick(0, 5);
        base_request(&rq, models[pick(0, 5)], hws[hwi], links[pick(0, 4)], nodes, gpn);
        if (hwi == 4) dt_precision_from_preset(DT_PREC_MIXED_FP16, &rq.base.precision);
        else if (pick(0, 3) == 0) dt_precision_from_preset((dt_precision_preset)pick(0, 3), &rq.base.precision);
        if (hwi == 4 && rq.base.precision.param == DT_DTYPE_BF16)
            dt_precision_from_preset(DT_PREC_FP32, &rq.base.precision);
        int64_t W = nodes * gpn;
        rq.base.batch.global_batch = W * pick(1, 24);
        rq.base.batch.seq_len = (int64_t)128 << pick(0, 4);
        if (rq.base.batch.seq_len > rq.base.model.max_pos) rq.base.batch.seq_len = rq.base.model.max_pos;
        rq.base.parallel.overlap_comm = (int)pick(0, 1);
        rq.base.parallel.reduce_bucket_elems = pick(1, 4) == 1 ? 5000000 : 500000000;
        /* memory limit around the interesting range: a fraction of the device */
        rq.mem_limit_bytes = (int64_t)((double)rq.base.cluster.hw.device_mem_bytes * (0.05 + 0.95 * (double)(rnd() % 1000) / 1000.0));
        if (rq.mem_limit_bytes <= rq.base.cluster.hw.reserve_bytes) rq.mem_limit_bytes = rq.base.cluster.hw.reserve_bytes + 1;
        if (pick(0, 2) == 0) rq.host_limit_bytes = (int64_t)(1 + rnd() % 64) << 30;
        if (pick(0, 2) == 0) rq.nvme_limit_bytes = (int64_t)(rnd() % 128) << 30;
        rq.stage_mask = (unsigned)pick(1, 15);
        rq.allow_offload = pick(0, 3) != 0;

        int rm = dt_solve(&rq, m, &em), re = dt_solve_enumerate(&rq, e, &ee);
        int bad = rm != re;
        if (!bad && rm == DT_OK) {
            n_feasible++;
            n_stage_choices[m->best.zero_stage]++;
            n_ckpt += m->best.ckpt_layers > 0;
            n_offload += m->best.offload_optimizer != DT_OFFLOAD_NONE;
            bad = !same_choice_value(&m->best, &e->best) || !m->best.fits;
            /* the plan the MILP returns is the choice it reports, re-evaluated */
            bad |= m->plan.prediction.memory.total != m->best.mem.total ||
                   fabs(m->plan.prediction.time.step_s - m->best.step_s) > 1e-12 * m->best.step_s ||
                   m->plan.batch.micro_batch * m->plan.batch.grad_accum * W != rq.base.batch.global_batch;
            for (int s = 0; s < 4; s++)
                if ((rq.stage_mask >> s) & 1u) bad |= !same_choice_value(&m->per_stage[s], &e->per_stage[s]);
        } else if (!bad && rm == DT_EINFEASIBLE) {
            n_infeasible++;
            bad = m->min_memory.mem.total != e->min_memory.mem.total || strcmp(em.msg, ee.msg) != 0;
            bad |= m->min_memory.fits; /* it did not fit the request... */
        } else if (!bad) {
            bad = strcmp(em.msg, ee.msg) != 0; /* same error */
            if (getenv("DT_TEST_VERBOSE")) fprintf(stderr, "error instance %d: %s\n", it, em.msg);
        }
        if (bad) {
            n_mismatch++;
            fprintf(stderr, "instance %d: %s %s nodes %lld gpn %lld gb %lld seq %lld mem %lld mask %u off %d: rc %d vs %d\n",
                    it, rq.base.model.name, rq.base.cluster.hw.name, (long long)nodes, (long long)gpn,
                    (long long)rq.base.batch.global_batch, (long long)rq.base.batch.seq_len,
                    (long long)rq.mem_limit_bytes, rq.stage_mask, rq.allow_offload, rm, re);
            fprintf(stderr, "  milp: %s\n  enum: %s\n", rm ? em.msg : "ok", re ? ee.msg : "ok");
            print_choice("milp best", &m->best);
            print_choice("enum best", &e->best);
            for (int s = 0; s < 4; s++) {
                print_choice("milp stage", &m->per_stage[s]);
                print_choice("enum stage", &e->per_stage[s]);
            }
        }
    }
    CHECK(n_mismatch == 0);
    printf("%d instances: %d feasible (stages chosen %d/%d/%d/%d, %d with checkpointing, %d with offload), %d infeasible\n",
           n_instances, n_feasible, n_stage_choices[0], n_stage_choices[1], n_stage_choices[2], n_stage_choices[3],
           n_ckpt, n_offload, n_infeasible);
    /* the randomisation must actually exercise the interesting cases */
    if (n_instances >= 200) {
        CHECK(n_feasible > n_instances / 4 && n_infeasible > 5);
        CHECK(n_ckpt > 5 && n_offload > 2);
        CHECK(n_stage_choices[0] > 0 && n_stage_choices[3] > 0);
        CHECK(n_stage_choices[1] + n_stage_choices[2] > 0);
    }

    /* ---- fixed cases ---- */
    dt_solve_request rq;
    dt_error err;
    /* 32B on 8 x H100 at 80G: something fits, with a limit-respecting breakdown */
    base_request(&rq, "qwen2.5-32b", "H100-SXM-80GB", NULL, 1, 8);
    CHECK(dt_solve(&rq, m, &err) == DT_OK);
    CHECK(m->best.fits && m->plan.prediction.memory.total <= rq.mem_limit_bytes);
    CHECK(m->per_stage[0].valid && !m->per_stage[0].fits); /* DDP cannot hold 32B */
    CHECK(m->plan.prediction.valid && m->plan.parallel.zero_stage == m->best.zero_stage);
    CHECK(dt_plan_validate(&m->plan, &err) == DT_OK);
    /* infeasible: 32B in 3 GiB per GPU, no offload; the reported minimum fits when used as the limit */
    rq.mem_limit_bytes = (int64_t)3 << 30;
    rq.allow_offload = 0;
    CHECK(dt_solve(&rq, m, &err) == DT_EINFEASIBLE);
    CHECK(strstr(err.msg, "nothing fits in 3.00 GiB per GPU") && strstr(err.msg, "smallest memory that fits"));
    CHECK(strstr(err.msg, "ZeRO-3") != NULL);
    int64_t need = m->min_memory.mem.total;
    rq.mem_limit_bytes = need;
    CHECK(dt_solve(&rq, m, &err) == DT_OK);
    CHECK(m->best.mem.total <= need);
    rq.mem_limit_bytes = need - 1;
    CHECK(dt_solve(&rq, m, &err) == DT_EINFEASIBLE);
    /* host limit too small for any offload and device too small without: reports host */
    base_request(&rq, "llama-2-7b", "A100-40GB", NULL, 1, 1);
    rq.stage_mask = 1u << 3;
    rq.mem_limit_bytes = (int64_t)4 << 30;
    rq.host_limit_bytes = (int64_t)1 << 30;
    rq.nvme_limit_bytes = 0;
    CHECK(dt_solve(&rq, m, &err) == DT_EINFEASIBLE);
    /* --stages filter and --no-offload are honoured */
    base_request(&rq, "gpt2", "A100-80GB", NULL, 1, 4);
    rq.stage_mask = 1u << 2;
    CHECK(dt_solve(&rq, m, &err) == DT_OK && m->best.zero_stage == 2);
    CHECK(!m->per_stage[0].valid && !m->per_stage[3].valid);
    base_request(&rq, "llama-2-7b", "A100-40GB", NULL, 1, 2);
    rq.allow_offload = 0;
    if (dt_solve(&rq, m, &err) == DT_OK)
        CHECK(m->best.offload_optimizer == DT_OFFLOAD_NONE && m->best.offload_param == DT_OFFLOAD_NONE);
    /* bad requests */
    base_request(&rq, "gpt2", "A100-80GB", NULL, 1, 4);
    rq.base.batch.global_batch = 10; /* not a multiple of 4 */
    CHECK(dt_solve(&rq, m, &err) == DT_EINVAL);
    CHECK(strstr(err.msg, "--global-batch 10 is not a multiple of the world size 4") != NULL);
    base_request(&rq, "gpt2", "A100-80GB", NULL, 1, 4);
    rq.stage_mask = 0;
    CHECK(dt_solve(&rq, m, &err) == DT_EINVAL);
    /* the micro-batch walk is bounded: a huge global batch fails at once (issue 16;
     * before, 1e12 / 4 micro-batches were tried one by one for minutes) */
    base_request(&rq, "gpt2", "A100-80GB", NULL, 1, 4);
    rq.base.batch.global_batch = INT64_C(1000000000000);
    CHECK(dt_solve(&rq, m, &err) == DT_EINVAL);
    CHECK(strstr(err.msg, "lower --global-batch to 262144 or less") != NULL);
    CHECK(dt_solve_enumerate(&rq, e, &err) == DT_EINVAL);
    rq.base.batch.global_batch = 4 * DT_SOLVE_MAX_SEQS_PER_RANK; /* the bound itself is allowed */
    CHECK(dt_solve_check(&rq, &err) == DT_OK);
    /* V100 with bf16: the time model refuses, the solver passes the message on */
    base_request(&rq, "gpt2", "V100-32GB", NULL, 1, 1);
    CHECK(dt_solve(&rq, m, &err) == DT_EINVAL);
    CHECK(strstr(err.msg, "bf16") != NULL);
    free(m);
    free(e);
    TEST_MAIN_END();
}
