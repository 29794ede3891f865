/* The docs stay honest: README.md fits a newcomer's first read (at most 250 lines) and names
 * exactly the two set-up commands; every relative link of README.md, the pages of docs/,
 * bench/README.md and tests/README.md reaches a file that exists, and a link with a #fragment
 * names a heading of its target, by GitHub's anchor rule (lowercase; spaces become '-'; other
 * punctuation but '-' and '_' is dropped; a repeated heading gets -1, -2, ...). Links inside code
 * (fenced blocks, `spans`) are text, not links, and are not followed; absolute URLs are not
 * checked. */
#include <criterion/criterion.h>
#include <ctype.h>
#include <stdarg.h>
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

enum { README_MAX_LINES = 250, PATH_CAP = 4096, MAX_ANCHORS = 1024, ANCHOR_CAP = 256 };

/* The pages checked, relative to the source tree; the .md files of docs/ are added from the folder. */
static const char *const fixed_pages[] = {"README.md", "bench/README.md", "tests/README.md"};
/* The set-up commands README.md gives, and no other `bash scripts/...`. */
static const char *const setup_commands[] = {"bash scripts/quickstart.sh", "bash scripts/test.sh"};

/* snprintf that fails the test rather than cut a path or a name short. */
__attribute__((format(printf, 3, 4))) static void fmt_into(char *out, size_t cap, const char *fmt, ...) {
    va_list args;
    va_start(args, fmt);
    int n = vsnprintf(out, cap, fmt, args);
    va_end(args);
    cr_assert(n >= 0 && (size_t)n < cap, "%.60s... is longer than %zu bytes", out, cap);
}

static char *read_text(const char *path) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    size_t cap = 1 << 16, len = 0;
    char *text = malloc(cap);
    cr_assert_not_null(text);
    size_t got;
    while ((got = fread(text + len, 1, cap - len - 1, f)) > 0) {
        len += got;
        if (cap - len - 1 == 0) {
            cap *= 2;
            text = realloc(text, cap);
            cr_assert_not_null(text);
        }
    }
    fclose(f);
    text[len] = '\0';
    return text;
}

static char *read_page(const char *rel) {
    char path[PATH_CAP];
    fmt_into(path, sizeof path, "%s/%s", TAPEGRAD_SOURCE_DIR, rel);
    char *text = read_text(path);
    cr_assert_not_null(text, "cannot read %s", path);
    return text;
}

/* The next line of *cursor into line (without its newline); false at the end of the text. */
static bool next_line(const char **cursor, char *line, size_t cap) {
    const char *at = *cursor;
    if (!*at) return false;
    const char *end = strchr(at, '\n');
    size_t n = end ? (size_t)(end - at) : strlen(at);
    fmt_into(line, cap, "%.*s", (int)(n < cap ? n : cap - 1), at);
    *cursor = end ? end + 1 : at + n;
    return true;
}

/* A line that opens or closes a fenced code block (``` or ~~~, indented or not). */
static bool is_fence(const char *line) {
    while (*line == ' ') line++;
    return strncmp(line, "```", 3) == 0 || strncmp(line, "~~~", 3) == 0;
}

/* GitHub's anchor of a heading's text. */
static void anchor_of(const char *heading, char *out, size_t cap) {
    size_t n = 0;
    for (const unsigned char *c = (const unsigned char *)heading; *c && n + 1 < cap; c++) {
        if (*c == ' ') out[n++] = '-';
        else if (*c == '-' || *c == '_' || isalnum(*c) || *c >= 0x80) out[n++] = (char)tolower(*c);
    }
    out[n] = '\0';
}

typedef struct {
    char names[MAX_ANCHORS][ANCHOR_CAP];
    int count;
} Anchors;

static bool anchors_has(const Anchors *a, const char *name) {
    for (int i = 0; i < a->count; i++)
        if (strcmp(a->names[i], name) == 0) return true;
    return false;
}

/* The anchors of every heading of a Markdown text (headings inside fenced blocks are code). */
static void collect_anchors(const char *text, Anchors *a) {
    a->count = 0;
    char line[8192];
    bool in_code = false;
    for (const char *cursor = text; next_line(&cursor, line, sizeof line);) {
        if (is_fence(line)) in_code = !in_code;
        if (in_code || line[0] != '#') continue;
        const char *h = line;
        while (*h == '#') h++;
        if (h - line > 6 || *h != ' ') continue;
        while (*h == ' ') h++;
        char heading[8192];
        fmt_into(heading, sizeof heading, "%s", h);
        for (size_t n = strlen(heading); n > 0 && (heading[n - 1] == '#' || heading[n - 1] == ' ');) heading[--n] = '\0';
        char base[ANCHOR_CAP], name[ANCHOR_CAP + 16];
        anchor_of(heading, base, sizeof base);
        fmt_into(name, sizeof name, "%s", base);
        for (int k = 1; anchors_has(a, name); k++) fmt_into(name, sizeof name, "%s-%d", base, k);
        cr_assert_lt(a->count, MAX_ANCHORS, "too many headings");
        fmt_into(a->names[a->count++], ANCHOR_CAP, "%s", name);
    }
}

/* Replaces every `code span` of line by spaces, so that what it quotes is not read as a link. */
static void blank_code_spans(char *line) {
    for (char *open = strchr(line, '`'); open;) {
        size_t ticks = strspn(open, "`");
        char *close = open + ticks;
        for (;;) {
            close = strchr(close, '`');
            if (!close || strspn(close, "`") == ticks) break;
            close += strspn(close, "`");
        }
        if (!close) break;
        memset(open, ' ', (size_t)(close + ticks - open));
        open = strchr(close + ticks, '`');
    }
}

/* Checks every relative link of one page; returns the number of broken ones, each printed. */
static int check_links(const char *page, int *links) {
    char *text = read_page(page);
    char dir[PATH_CAP];
    fmt_into(dir, sizeof dir, "%s", page);
    char *slash = strrchr(dir, '/');
    if (slash) slash[1] = '\0';
    else dir[0] = '\0';
    char line[8192];
    int bad = 0, lineno = 0;
    bool in_code = false;
    for (const char *cursor = text; next_line(&cursor, line, sizeof line);) {
        lineno++;
        if (is_fence(line)) {
            in_code = !in_code;
            continue;
        }
        if (in_code) continue;
        blank_code_spans(line);
        for (char *at = strstr(line, "]("); at; at = strstr(at + 2, "](")) {
            char *target = at + 2, *end = strchr(target, ')');
            if (!end) continue;
            char link[PATH_CAP];
            fmt_into(link, sizeof link, "%.*s", (int)(end - target), target);
            char *space = strchr(link, ' '); /* [text](path "title") */
            if (space) *space = '\0';
            if (strstr(link, "://") || strncmp(link, "mailto:", 7) == 0 || !link[0]) continue;
            (*links)++;
            char *hash = strchr(link, '#');
            const char *fragment = hash ? hash + 1 : NULL;
            if (hash) *hash = '\0';
            char rel[PATH_CAP * 2], path[PATH_CAP * 3];
            if (link[0]) fmt_into(rel, sizeof rel, "%s%s", dir, link);
            else fmt_into(rel, sizeof rel, "%s", page); /* #fragment: this page */
            fmt_into(path, sizeof path, "%s/%s", TAPEGRAD_SOURCE_DIR, rel);
            struct stat st;
            if (stat(path, &st) != 0) {
                fprintf(stderr, "%s:%d: link to %s: no such file\n", page, lineno, rel);
                bad++;
                continue;
            }
            if (!fragment) continue;
            char *target_text = S_ISREG(st.st_mode) ? read_text(path) : NULL;
            static Anchors anchors;
            if (target_text) collect_anchors(target_text, &anchors);
            if (!target_text || !anchors_has(&anchors, fragment)) {
                fprintf(stderr, "%s:%d: link to %s#%s: no such heading there\n", page, lineno, rel, fragment);
                bad++;
            }
            free(target_text);
        }
    }
    free(text);
    return bad;
}

Test(docs, the_readme_fits_a_first_read) {
    char *text = read_page("README.md");
    int lines = 0;
    for (const char *c = text; *c; c++) lines += *c == '\n';
    cr_expect_leq(lines, README_MAX_LINES, "README.md has %d lines; at most %d: move long sections to docs/", lines,
                  README_MAX_LINES);
    free(text);
}

Test(docs, the_readme_names_exactly_the_two_setup_commands) {
    char *text = read_page("README.md");
    enum { N = sizeof setup_commands / sizeof setup_commands[0] };
    bool given[N] = {false};
    char line[8192];
    bool in_code = false;
    for (const char *cursor = text; next_line(&cursor, line, sizeof line);) {
        if (is_fence(line)) in_code = !in_code;
        for (const char *at = strstr(line, "bash scripts/"); at; at = strstr(at + 1, "bash scripts/")) {
            size_t n = strspn(at + strlen("bash scripts/"), "abcdefghijklmnopqrstuvwxyz0123456789_-.");
            char command[256];
            fmt_into(command, sizeof command, "%.*s", (int)(strlen("bash scripts/") + n), at);
            for (size_t len = strlen(command); len > 0 && command[len - 1] == '.';) command[--len] = '\0'; /* a full stop */
            bool known = false;
            for (int i = 0; i < N; i++)
                if (strcmp(command, setup_commands[i]) == 0) known = true;
            cr_expect(known, "README.md names `%s`, which is not one of the two set-up commands", command);
        }
        /* each command stands on a line of its own in a code block, ready to paste */
        for (int i = 0; i < N; i++)
            if (in_code && strcmp(line, setup_commands[i]) == 0) given[i] = true;
    }
    for (int i = 0; i < N; i++) {
        cr_expect(given[i], "README.md does not give `%s` on a line of its own in a code block", setup_commands[i]);
        char path[PATH_CAP];
        fmt_into(path, sizeof path, "%s/%s", TAPEGRAD_SOURCE_DIR, setup_commands[i] + strlen("bash "));
        struct stat st;
        cr_expect(stat(path, &st) == 0 && S_ISREG(st.st_mode), "README.md names %s, which does not exist", path);
    }
    free(text);
}

Test(docs, every_relative_link_reaches_a_file_and_a_heading) {
    char pages[64][PATH_CAP];
    int n_pages = 0;
    for (size_t i = 0; i < sizeof fixed_pages / sizeof fixed_pages[0]; i++)
        fmt_into(pages[n_pages++], PATH_CAP, "%s", fixed_pages[i]);
    char docs[PATH_CAP];
    fmt_into(docs, sizeof docs, "%s/docs", TAPEGRAD_SOURCE_DIR);
    DIR *d = opendir(docs);
    cr_assert_not_null(d, "no folder %s", docs);
    struct dirent *e;
    while ((e = readdir(d))) {
        size_t n = strlen(e->d_name);
        if (n < 4 || strcmp(e->d_name + n - 3, ".md") != 0) continue;
        cr_assert_lt(n_pages, 64, "too many pages");
        fmt_into(pages[n_pages++], PATH_CAP, "docs/%s", e->d_name);
    }
    closedir(d);
    int bad = 0, links = 0;
    for (int i = 0; i < n_pages; i++) bad += check_links(pages[i], &links);
    cr_expect_eq(bad, 0, "%d of %d relative links are broken (listed above)", bad, links);
    /* the pages link to each other: a parser that found none would pass anything */
    cr_expect_geq(links, 40, "only %d relative links found in %d pages", links, n_pages);
}

/* The anchor rule itself, on headings of the kinds the docs have. */
Test(docs, anchors_follow_githubs_rule) {
    const struct {
        const char *heading, *anchor;
    } cases[] = {
        {"Renamed in 0.3.0", "renamed-in-030"},
        {"Checkpoint size, save and load times (`ckpt_bench`)", "checkpoint-size-save-and-load-times-ckpt_bench"},
        {"The 2-rank tests (`tests/test_mpi.c`)", "the-2-rank-tests-teststest_mpic"},
        {"AMD EPYC, family 25 model 17 (Zen 4, AVX-512), 2 cores", "amd-epyc-family-25-model-17-zen-4-avx-512-2-cores"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char anchor[ANCHOR_CAP];
        anchor_of(cases[i].heading, anchor, sizeof anchor);
        cr_expect_str_eq(anchor, cases[i].anchor, "heading \"%s\"", cases[i].heading);
    }
    static Anchors a;
    collect_anchors("# Results\n\n```sh\n# not a heading\n```\n## Results\n### Results ###\n", &a);
    cr_expect_eq(a.count, 3);
    cr_expect_str_eq(a.names[0], "results");
    cr_expect_str_eq(a.names[1], "results-1");
    cr_expect_str_eq(a.names[2], "results-2");
}
