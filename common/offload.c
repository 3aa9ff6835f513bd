/* offload.c — the offload devices' names (dt_plan.h), apart from plan.c so that the
 * plan's sections (layout.c, ...) can name them without using the plan reader. */
#include <string.h>

#include "dt_plan.h"

const char *const dt_offload_names[DT_OFFLOAD_KINDS] = {"none", "cpu", "nvme"};

const char *dt_offload_name(dt_offload o) {
    return (o >= 0 && (int)o < DT_OFFLOAD_KINDS) ? dt_offload_names[o] : "?";
}

int dt_offload_parse(const char *s, dt_offload *out, dt_error *err) {
    for (int i = 0; s && i < DT_OFFLOAD_KINDS; i++)
        if (!strcmp(s, dt_offload_names[i])) {
            *out = (dt_offload)i;
            return DT_OK;
        }
    return dt_errorf(err, DT_EINVAL, "unknown offload device '%s' (use none, cpu or nvme)",
                     s ? s : "");
}
