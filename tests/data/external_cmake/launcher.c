/* Execs the configured adapter with the request path: a native binary built by cmake. */
#include <stdio.h>
#include <unistd.h>

int main(int argc, char **argv) {
    if (argc != 2) {
        fprintf(stderr, "usage: %s REQUEST.json\n", argv[0]);
        return 2;
    }
    char *args[] = {PYTHON_PATH, ADAPTER_PATH, argv[1], NULL};
    execv(PYTHON_PATH, args);
    perror("execv");
    return 127;
}
