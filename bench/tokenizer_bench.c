/* Reading and encoding with an imported tokenizer.json, on files this program writes itself:
 *   - encoding: a byte-level vocabulary with N added tokens (default 65,535, the most a file may
 *     hold) and a text of B bytes (default 171,000) that holds some of them;
 *   - memory: the peak RSS of reading files of about M MB (default 32) close to the worst of
 *     their kind (a long ignored array, short vocabulary strings, short merges; and 65,535 added
 *     tokens at the limit of their text, 4 MB), each in a child process, against the bound of
 *     tokenizer/tokenizer_hf.h.
 * usage: tokenizer_bench [--added N] [--text B] [--mb M]      (docs/results.md has the figures) */
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include "tokenizer/tokenizer_hf.h"
#include "support/clock.h"
#include "tapegrad/tokenizer.h"

static char dir[] = "/tmp/tokenizer-bench-XXXXXX";

/* GPT-2's ByteLevel text of byte b (tokenizer/tokenizer_hf.c), as a JSON string. */
static void byte_key(FILE *f, int b) {
    unsigned cp = b <= 0x20 ? 0x100u + (unsigned)b : b >= 0x7f && b <= 0xa0 ? 0x121u + (unsigned)(b - 0x7f) : b == 0xad ? 0x143u : (unsigned)b;
    if (cp == '"' || cp == '\\') fprintf(f, "\"\\%c\"", cp);
    else if (cp < 0x80) fprintf(f, "\"%c\"", cp);
    else fprintf(f, "\"%c%c\"", 0xC0 | (cp >> 6), 0x80 | (cp & 0x3F));
}

/* The head of a file: added tokens `added` (JSON list items), then the vocabulary's 256 bytes
 * and <|endoftext|>; the caller adds the rest of the vocabulary and closes it. */
static FILE *begin(const char *path, const char *added_extra, int n_added, int content_repeat) {
    FILE *f = fopen(path, "w");
    if (!f) {
        perror(path);
        exit(1);
    }
    fputs("{\"added_tokens\":[{\"id\":256,\"content\":\"<|endoftext|>\",\"special\":true}", f);
    for (int k = 0; k < n_added; k++) {
        fprintf(f, ",{\"id\":%d,\"content\":\"", 257 + k);
        if (content_repeat) for (int r = 0; r < content_repeat; r++) fprintf(f, "%05d", k);
        else fprintf(f, "<|tok%05d|>", k);
        fputs("\",\"special\":false}", f);
    }
    fprintf(f, "],%s\"normalizer\":null,\"pre_tokenizer\":{\"type\":\"ByteLevel\"},\"model\":{\"type\":\"BPE\",\"vocab\":{", added_extra);
    for (int b = 0; b < 256; b++) {
        byte_key(f, b);
        fprintf(f, ":%d,", b);
    }
    fputs("\"<|endoftext|>\":256", f);
    return f;
}

/* The peak RSS in kB: in a child just forked, its RSS then (Linux starts its peak there). */
static long peak_kb(void) {
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    return ru.ru_maxrss;
}

static void encoding(int n_added, size_t text_bytes) {
    char path[256];
    snprintf(path, sizeof path, "%s/added.json", dir);
    FILE *f = begin(path, "", n_added, 0);
    fputs("},\"merges\":[]}}", f);
    fclose(f);
    TgTokenizer tok;
    double t0 = tg_clock_seconds();
    if (tg_tokenizer_hf_load(path, &tok) != TG_OK) {
        fprintf(stderr, "%s\n", tg_error_message());
        exit(1);
    }
    double loaded = tg_clock_seconds() - t0;
    char *text = malloc(text_bytes + 16);
    static const char *const words[] = {"the ", "quick ", "brown ", "fox ", "jumps ", "over ", "lazy ", "dog. "};
    size_t n = 0;
    for (unsigned k = 0; n < text_bytes; k++) {
        int l = k % 11 == 10 && n_added ? snprintf(text + n, 16, "<|tok%05u|>", k % (unsigned)n_added)
                                        : snprintf(text + n, 16, "%s", words[(k * 7) % 8]);
        n += (size_t)l;
    }
    n = text_bytes;
    size_t cap = tg_tokenizer_max_ids(&tok, n), n_ids;
    int32_t *ids = malloc(cap * sizeof *ids);
    t0 = tg_clock_seconds();
    tg_tokenizer_encode(&tok, text, n, ids, cap, &n_ids);
    double encoded = tg_clock_seconds() - t0;
    printf("encode: %d added tokens: load %.3f s; %zu bytes -> %zu ids in %.4f s (%.1f MB/s)\n", n_added, loaded, n, n_ids, encoded,
           (double)n / encoded / 1e6);
    free(ids), free(text);
    tg_tokenizer_free(&tok);
}

static void write_junk(FILE *f, size_t target) {
    fputs("},\"merges\":[]},\"junk\":[1", f);
    for (long n = ftell(f); (size_t)n < target; n += 2) fputs(",1", f);
    fputs("]}", f);
}

static void write_vocab(FILE *f, size_t target) {
    int id = 257;
    for (char s[5] = "AAAA"; ftell(f) < (long)target && id < TG_TOKENIZER_HF_MAX_IDS; id++) {
        fprintf(f, ",\"%s\":%d", s, id);
        for (int i = 3; i >= 0 && ++s[i] > 'z'; i--) s[i] = 'A'; /* the next of 58^4 strings of 'A'..'z' */
        for (int i = 0; i < 4; i++)
            if (s[i] == '\\') s[i]++;
    }
    fputs("},\"merges\":[]}}", f);
}

/* The string of index x among the len-letter strings of k letters. */
static void letters(int x, int len, int k, char *s) {
    for (int i = 0; i < len; i++, x /= k) s[i] = (char)(x % k < 26 ? 'a' + x % k : 'A' + x % k - 26);
}

/* Every string of 2 to 4 of k letters, each made by every split of it: about 41 bytes of file
 * for each 4-letter one, and over 2^21 merges at 32 MB, where the rank map is fullest. */
static void write_merges(FILE *f, size_t target) {
    int k = 2;
    while (k < 52 && (size_t)k * k * k * k * 41 < target) k++;
    char s[4];
    int id = 257;
    for (int len = 2, count = k * k; len <= 4; len++, count *= k)
        for (int x = 0; x < count; x++) {
            letters(x, len, k, s);
            fprintf(f, ",\"%.*s\":%d", len, s, id++);
        }
    fputs("},\"merges\":[", f);
    const char *sep = "";
    for (int len = 2, count = k * k; len <= 4; len++, count *= k)
        for (int x = 0; x < count; x++) {
            letters(x, len, k, s);
            for (int cut = 1; cut < len; cut++, sep = ",") fprintf(f, "%s\"%.*s %.*s\"", sep, cut, s, len - cut, s + cut);
        }
    fputs("]}}", f);
}

static void memory(const char *kind, size_t target) {
    char path[256];
    snprintf(path, sizeof path, "%s/%s.json", dir, kind);
    bool added = strcmp(kind, "added") == 0;
    FILE *f = begin(path, "", added ? 65535 : 0, added ? 12 : 0);
    if (strcmp(kind, "junk") == 0) write_junk(f, target);
    else if (strcmp(kind, "vocab") == 0) write_vocab(f, target);
    else if (strcmp(kind, "merges") == 0) write_merges(f, target);
    else fputs("},\"merges\":[]}}", f);
    long size = ftell(f);
    fclose(f);
    fflush(stdout); /* or the child prints it again */
    pid_t pid = fork();
    if (pid == 0) {
        long before = peak_kb();
        TgTokenizer tok;
        double t0 = tg_clock_seconds();
        TgStatus s = tg_tokenizer_hf_load(path, &tok);
        double took = tg_clock_seconds() - t0;
        long rose = peak_kb() - before;
        if (s != TG_OK) printf("%s: %s\n", kind, tg_error_message());
        else
            printf("memory: %-6s %9.1f MB file: RSS +%7.1f MB (%.2f bytes a byte; bound %.1f MB), %.2f s\n", kind, size / 1e6,
                   rose * 1024 / 1e6, rose * 1024.0 / (double)size, (10.0 * (double)size + 64.0 * (1 << 20)) / 1e6, took);
        fflush(stdout);
        _exit(s == TG_OK ? 0 : 1);
    }
    int status;
    waitpid(pid, &status, 0);
    unlink(path);
}

int main(int argc, char **argv) {
    int n_added = 65535;
    size_t text_bytes = 171000, mb = 32;
    for (int i = 1; i + 1 < argc; i += 2) {
        if (strcmp(argv[i], "--added") == 0) n_added = atoi(argv[i + 1]);
        else if (strcmp(argv[i], "--text") == 0) text_bytes = (size_t)atol(argv[i + 1]);
        else if (strcmp(argv[i], "--mb") == 0) mb = (size_t)atol(argv[i + 1]);
    }
    if (n_added < 0 || n_added > TG_TOKENIZER_HF_MAX_ADDED - 1) {
        fprintf(stderr, "--added: 0 to %d\n", TG_TOKENIZER_HF_MAX_ADDED - 1);
        return 1;
    }
    if (!mkdtemp(dir)) {
        perror(dir);
        return 1;
    }
    encoding(n_added, text_bytes);
    const char *kinds[] = {"junk", "vocab", "merges", "added"};
    for (int k = 0; k < 4; k++) memory(kinds[k], mb << 20);
    rmdir(dir);
    return 0;
}
