/* test_reward.c — GRPO's reward command and exact-answer reward (engine/run/reward.c):
 * small /bin/sh commands that score, fail, hang (alone and with a grandchild), print a
 * non-number or the wrong count, stop reading a large input; the JSONL they read; the built-in
 * exact-answer check. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "dt_clock.h"
#include "dt_reward.h"
#include "dt_test.h"

/* a hanging command must be killed well before its own sleep ends */
#define HANG_TIMEOUT_S 0.5
#define HANG_BOUND_S 5.0

static const dt_reward_item ITEMS[3] = {
    {"What is 2+3?", "5", "5"},
    {"Say \"hi\"", "hi\nthere \"you\"", NULL},
    {"12+30=", "The answer is 42.", "42"},
};

static int run(const char *cmd, double timeout, double *r, dt_error *err) {
    dt_error_clear(err);
    return dt_reward_command(cmd, ITEMS, 3, timeout, r, err);
}

static void check_scores(void) {
    double r[3] = {0};
    dt_error err = {0};
    const char *cmd = "while IFS= read -r l; do case \"$l\" in *'\"answer\"'*) echo 1;; *) echo ' 0.5 ';; esac; done";
    CHECK(run(cmd, 10, r, &err) == 0);
    CHECK_NEAR(r[0], 1, 0);
    CHECK_NEAR(r[1], 0.5, 0);
    CHECK_NEAR(r[2], 1, 0);
}

/* the JSONL the command reads, byte for byte */
static void check_input(void) {
    char path[] = "/tmp/dt_reward_inXXXXXX", cmd[256], got[1024] = {0};
    int fd = mkstemp(path);
    CHECK(fd >= 0);
    close(fd);
    snprintf(cmd, sizeof cmd, "cat > %s; printf '1\\n2\\n3\\n'", path);
    double r[3];
    dt_error err = {0};
    CHECK(run(cmd, 10, r, &err) == 0);
    FILE *f = fopen(path, "r");
    CHECK(f && fread(got, 1, sizeof got - 1, f) > 0);
    if (f) fclose(f);
    unlink(path);
    CHECK_STR(got, "{\"prompt\":\"What is 2+3?\",\"completion\":\"5\",\"answer\":\"5\"}\n"
                   "{\"prompt\":\"Say \\\"hi\\\"\",\"completion\":\"hi\\nthere \\\"you\\\"\"}\n"
                   "{\"prompt\":\"12+30=\",\"completion\":\"The answer is 42.\",\"answer\":\"42\"}\n");
    CHECK_NEAR(r[2], 3, 0);
}

static void check_refused(const char *cmd, const char *words) {
    double r[3];
    dt_error err = {0};
    double t0 = dt_clock_s();
    CHECK_EQ_I64(run(cmd, HANG_TIMEOUT_S, r, &err), DT_EINVAL);
    CHECK(dt_clock_s() - t0 < HANG_BOUND_S);
    if (!strstr(err.msg, words) || !strstr(err.msg, "reward command")) {
        fprintf(stderr, "%s: message '%s' lacks '%s'\n", cmd, err.msg, words);
        dt_test_failures++;
    }
    CHECK(strchr(err.msg, '\n') == NULL);
}

/* a command that exits without reading 4 MiB of input: no SIGPIPE kills us, its scores count */
static void check_unread_input(void) {
    enum { N = 4, BIG = 1 << 20 };
    char *big = malloc(BIG + 1);
    memset(big, 'x', BIG);
    big[BIG] = 0;
    dt_reward_item it[N];
    for (int i = 0; i < N; i++) it[i] = (dt_reward_item){"p", big, NULL};
    double r[N];
    dt_error err = {0};
    CHECK(dt_reward_command("printf '1\\n2\\n3\\n4\\n'", it, N, 10, r, &err) == 0);
    CHECK_NEAR(r[3], 4, 0);
    free(big);
}

static void check_exact(void) {
    dt_reward_item it[] = {{"q", " 57\n", "57"},       {"q", "so 12 + 45 = 57", "57"}, {"q", "57.", "57"},
                           {"q", "1,234", "1234"},     {"q", "-3", "-3"},              {"q", "570", "57"},
                           {"q", "57 then 58", "57"},  {"q", "", "57"},                {"q", "x = 2.5", "2.5"}};
    double want[] = {1, 1, 1, 1, 1, 0, 0, 0, 1}, r[9];
    CHECK(dt_reward_exact(it, 9, r, NULL) == 0);
    for (int i = 0; i < 9; i++) CHECK_NEAR(r[i], want[i], 0);
    dt_error err = {0};
    CHECK(dt_reward_exact(ITEMS, 3, r, &err) == DT_EINVAL);
    CHECK(strstr(err.msg, "record 1 has no answer") != NULL);
}

int main(void) {
    check_scores();
    check_input();
    check_refused("cat >/dev/null; exit 3", "exited with status 3");
    check_refused("cat >/dev/null; kill -9 $$", "killed by signal 9");
    check_refused("sleep 30", "was killed");
    check_refused("sleep 30 & wait", "was killed");
    check_refused("cat >/dev/null; echo 1; echo abc; echo 2", "line 2 'abc' (record 1) is not a finite number");
    check_refused("cat >/dev/null; echo 1; echo nan; echo 2", "record 1");
    check_refused("cat >/dev/null; echo 1", "printed 1 scores for 3 completions (record 1 has none)");
    check_refused("cat >/dev/null; printf '1\\n2\\n3\\n4\\n'", "more lines");
    check_refused("cat >/dev/null", "printed 0 scores");
    check_unread_input();
    check_exact();
    double r[3];
    dt_error err = {0};
    CHECK(dt_reward_command("", ITEMS, 3, 1, r, &err) == DT_EINVAL);
    CHECK(dt_reward_command("true", ITEMS, 3, 0, r, &err) == DT_EINVAL);
    TEST_MAIN_END();
}
