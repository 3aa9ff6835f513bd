/* dtrun — placeholder until the engine CLI lands (owner replaces this file). */
#include <stdio.h>

int main(int argc, char **argv) {
    (void)argc;
    (void)argv;
    fprintf(stderr, "dtrun: not available in this build yet\n");
    return 1;
}
