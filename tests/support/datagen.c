#include "datagen.h"

#include <ftw.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "tapegrad/error.h"
#include "tapegrad/rng.h"

static const char *const WORDS[] = {
    "the", "of", "and", "a", "to", "in", "is", "you", "that", "it", "he", "was", "for", "on",
    "are", "as", "with", "his", "they", "I", "at", "be", "this", "have", "from", "or", "one",
    "had", "by", "word", "but", "not", "what", "all", "were", "we", "when", "your", "can",
    "said", "there", "use", "an", "each", "which", "she", "do", "how", "their", "if", "will",
    "up", "other", "about", "out", "many", "then", "them", "these", "so", "some", "her",
    "would", "make", "like", "him", "into", "time", "has", "look", "two", "more", "write",
    "go", "see", "number", "no", "way", "could", "people", "my", "than", "first", "water",
    "been", "call", "who", "oil", "its", "now", "find", "long", "down", "day", "did", "get",
    "come", "made", "may", "part", "computer", "fortune", "program", "wisdom", "never",
    "always", "nothing", "everything", "because", "something", "morning", "question",
};

char *datagen_english(uint64_t seed, size_t len) {
    TgRng rng;
    tg_rng_seed(&rng, seed);
    size_t n_words = sizeof WORDS / sizeof WORDS[0];
    char *out = tg_malloc(len + 1);
    size_t pos = 0, line = 0;
    int capital = 1;
    while (pos < len) {
        char piece[48];
        const char *w = WORDS[tg_rng_below(&rng, n_words)];
        uint64_t r = tg_rng_below(&rng, 100);
        const char *punct = r < 8 ? "," : r < 18 ? "." : "";
        const char *sep = pos == 0 ? "" : line > 60 ? "\n" : " ";
        if (line > 60) line = 0;
        int np = snprintf(piece, sizeof piece, "%s%s%s", sep, w, punct);
        if (capital && w[0] >= 'a' && w[0] <= 'z') piece[strlen(sep)] = (char)(w[0] - 'a' + 'A');
        capital = punct[0] == '.';
        for (int i = 0; i < np && pos < len; i++) out[pos++] = piece[i];
        line += (size_t)np;
    }
    out[len] = '\0';
    return out;
}

enum { PROSE_LEXICON = 6000 };

/* One pseudo-word of 1-4 syllables (onset, vowel, coda) into out[0..47]. */
static void prose_word(TgRng *rng, char *out) {
    static const char *const onsets[] = {"", "b", "c", "d", "f", "g", "h", "j", "k", "l", "m", "n", "p",
                                         "r", "s", "t", "v", "w", "z", "br", "cl", "st", "tr", "sh",
                                         "ch", "th", "pl", "gr", "qu", "sp"};
    static const char *const vowels[] = {"a", "e", "i", "o", "u", "ai", "ea", "ou", "oo", "ie", "y"};
    static const char *const codas[] = {"", "", "", "n", "r", "s", "t", "l", "m", "nd", "st", "ng", "ck", "x"};
    size_t syllables = 1 + tg_rng_below(rng, 4), pos = 0;
    for (size_t s = 0; s < syllables; s++) {
        const char *parts[3] = {onsets[tg_rng_below(rng, sizeof onsets / sizeof onsets[0])],
                                vowels[tg_rng_below(rng, sizeof vowels / sizeof vowels[0])],
                                codas[tg_rng_below(rng, sizeof codas / sizeof codas[0])]};
        for (int p = 0; p < 3; p++)
            for (const char *c = parts[p]; *c && pos < 47; c++) out[pos++] = *c;
    }
    out[pos] = '\0';
}

char *datagen_prose(uint64_t seed, size_t len) {
    TgRng rng;
    tg_rng_seed(&rng, seed);
    char(*lexicon)[48] = tg_malloc(PROSE_LEXICON * sizeof *lexicon);
    double *cumulative = tg_malloc(PROSE_LEXICON * sizeof *cumulative);
    double total = 0;
    for (size_t r = 0; r < PROSE_LEXICON; r++) {
        prose_word(&rng, lexicon[r]);
        total += 1.0 / (double)(r + 1);
        cumulative[r] = total;
    }
    char *out = tg_malloc(len + 1);
    size_t pos = 0, line = 0;
    bool capital = true;
    while (pos < len) {
        double u = (double)tg_rng_below(&rng, 1u << 30) / (double)(1u << 30) * total;
        size_t lo = 0, hi = PROSE_LEXICON - 1;
        while (lo < hi) {
            size_t mid = (lo + hi) / 2;
            if (cumulative[mid] < u) lo = mid + 1;
            else hi = mid;
        }
        char word[48];
        uint64_t r = tg_rng_below(&rng, 100);
        if (r < 3) snprintf(word, sizeof word, "%llu", (unsigned long long)tg_rng_below(&rng, 10000));
        else snprintf(word, sizeof word, "%s", lexicon[lo]);
        if (capital) word[0] = (char)(word[0] >= 'a' && word[0] <= 'z' ? word[0] - 'a' + 'A' : word[0]);
        const char *punct = r >= 90 ? "." : r >= 84 ? "," : r == 83 ? "?" : r == 82 ? ";" : "";
        const char *sep = pos == 0 ? "" : line > 64 ? "\n" : " ";
        if (line > 64) line = 0;
        char piece[64];
        int np = snprintf(piece, sizeof piece, "%s%s%s", sep, word, punct);
        capital = punct[0] == '.' || punct[0] == '?';
        for (int i = 0; i < np && pos < len; i++) out[pos++] = piece[i];
        line += (size_t)np;
    }
    out[len] = '\0';
    free(lexicon);
    free(cumulative);
    return out;
}

char *datagen_tempdir(void) {
    const char *base = getenv("TMPDIR");
    if (!base || !*base) base = "/tmp";
    char *tmpl = datagen_path(base, "tapegrad-data-XXXXXX");
    if (!mkdtemp(tmpl)) tg_abort_at(__FILE__, __LINE__, "mkdtemp %s failed", tmpl);
    return tmpl;
}

static int remove_entry(const char *path, const struct stat *sb, int flag, struct FTW *ftw) {
    (void)sb;
    (void)flag;
    (void)ftw;
    return remove(path);
}

void datagen_remove_tree(const char *path) {
    if (path) nftw(path, remove_entry, 16, FTW_DEPTH | FTW_PHYS);
}

char *datagen_path(const char *dir, const char *name) {
    size_t n = strlen(dir) + strlen(name) + 2;
    char *p = tg_malloc(n);
    snprintf(p, n, "%s/%s", dir, name);
    return p;
}

void datagen_write(const char *dir, const char *name, const void *data, size_t len) {
    char *path = datagen_path(dir, name);
    for (char *s = path + strlen(dir) + 1; (s = strchr(s, '/')) != NULL; s++) {
        *s = '\0';
        mkdir(path, 0777);
        *s = '/';
    }
    FILE *f = fopen(path, "wb");
    if (!f || fwrite(data, 1, len, f) != len || fclose(f) != 0)
        tg_abort_at(__FILE__, __LINE__, "cannot write test file %s", path);
    free(path);
}
