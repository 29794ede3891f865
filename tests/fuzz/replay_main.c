/* Runs a fuzz harness over files, without libFuzzer: the seed corpus and every input a fuzzing
 * run once failed on (tests/fuzz/regressions), as an ordinary test in the normal build and
 * under the sanitizers. usage: replay_NAME FILE|DIR... (a folder: every file in it, in name order) */
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "fuzz_support.h"

static int replayed;

static void replay_file(const char *path) {
    FILE *f = fopen(path, "rb");
    if (!f) {
        perror(path);
        exit(1);
    }
    size_t cap = 1 << 16, n = 0, k;
    uint8_t *data = malloc(cap);
    while ((k = fread(data + n, 1, cap - n, f)) > 0)
        if ((n += k) == cap) data = realloc(data, cap *= 2);
    fclose(f);
    LLVMFuzzerTestOneInput(data, n);
    free(data);
    replayed++;
}

static int by_name(const struct dirent **a, const struct dirent **b) { return strcmp((*a)->d_name, (*b)->d_name); }

int main(int argc, char **argv) {
    for (int i = 1; i < argc; i++) {
        struct stat st;
        if (stat(argv[i], &st) != 0) continue; /* a harness without regressions has no folder */
        if (!S_ISDIR(st.st_mode)) {
            replay_file(argv[i]);
            continue;
        }
        struct dirent **names;
        int n = scandir(argv[i], &names, NULL, by_name);
        for (int j = 0; j < n; j++) {
            char path[4096];
            snprintf(path, sizeof path, "%s/%s", argv[i], names[j]->d_name);
            if (names[j]->d_name[0] != '.' && stat(path, &st) == 0 && S_ISREG(st.st_mode)) replay_file(path);
            free(names[j]);
        }
        free(names);
    }
    printf("%s: replayed %d inputs, none failed\n", argv[0], replayed);
    return replayed > 0 ? 0 : 1; /* an empty corpus tests nothing */
}
