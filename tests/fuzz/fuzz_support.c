#include "fuzz_support.h"

#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

static char scratch[512];

/* Removes dir and what is in it (the harnesses make files and one level of folders). */
static void remove_tree(const char *dir) {
    DIR *d = opendir(dir);
    if (!d) return;
    struct dirent *e;
    char path[1024];
    while ((e = readdir(d)))
        if (strcmp(e->d_name, ".") != 0 && strcmp(e->d_name, "..") != 0) {
            snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
            if (unlink(path) != 0) remove_tree(path);
        }
    closedir(d);
    rmdir(dir);
}

static void remove_scratch(void) { remove_tree(scratch); }

const char *fuzz_scratch(void) {
    if (scratch[0]) return scratch;
    /* a reader that writes without end (an endless loop around a write) dies of SIGXFSZ at
     * 256 MB, a failure like any other, before it fills a memory-backed folder */
    struct rlimit limit = {256u << 20, 256u << 20};
    setrlimit(RLIMIT_FSIZE, &limit);
    const char *base = getenv("TAPEGRAD_FUZZ_TMP");
    if (!base || !*base)
        base = access("/dev/shm", W_OK) == 0 ? "/dev/shm" : getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp";
    snprintf(scratch, sizeof scratch, "%s/tapegrad-fuzz-XXXXXX", base);
    if (!mkdtemp(scratch)) {
        perror("fuzz_scratch: mkdtemp");
        abort();
    }
    atexit(remove_scratch);
    return scratch;
}

const char *fuzz_write(const char *name, const void *data, size_t size) {
    static char path[1024];
    snprintf(path, sizeof path, "%s/%s", fuzz_scratch(), name);
    FILE *f = fopen(path, "wb");
    if (!f || (size && fwrite(data, 1, size, f) != size) || fclose(f) != 0) {
        perror(path);
        abort();
    }
    return path;
}

void fuzz_remove(const char *name) {
    char path[1024];
    snprintf(path, sizeof path, "%s/%s", fuzz_scratch(), name);
    unlink(path);
}

void fuzz_split(const uint8_t *data, size_t size, int n, const uint8_t **parts, size_t *lens) {
    const size_t sep = strlen(FUZZ_SEPARATOR);
    for (int i = 0; i < n; i++) {
        parts[i] = data, lens[i] = 0;
        if (i == n - 1) {
            lens[i] = size;
            break;
        }
        const uint8_t *hit = size >= sep ? memmem(data, size, FUZZ_SEPARATOR, sep) : NULL;
        if (!hit) {
            lens[i] = size;
            data += size, size = 0;
            continue;
        }
        lens[i] = (size_t)(hit - data);
        size -= lens[i] + sep;
        data = hit + sep;
    }
}

const TgTokenizer *fuzz_chat_tokenizer(void) {
    static TgTokenizer tok;
    static int ready;
    if (!ready) {
        static const char text[] = "user assistant system hello world, the reply. what is two and two? four.\n"
                                   "<|im_start|>user\nhi<|im_end|>\n caf\xc3\xa9 \xe4\xbd\xa0\xe5\xa5\xbd {\"a\": 1}\t";
        if (tg_tokenizer_bpe_train_specials(text, sizeof text - 1, 300, "chatml", &tok) != TG_OK) abort();
        ready = 1;
    }
    return &tok;
}
