/* The docs stay honest:
 * - README.md fits a newcomer's first read (at most 120 lines) and names exactly the two set-up
 *   commands; a page of docs/ is at most 300 lines (the results log apart: it grows by entries).
 * - Every relative link of the pages reaches a file that exists, and a link with a #fragment
 *   names a heading of its target, by GitHub's anchor rule (lowercase; spaces become '-'; other
 *   punctuation but '-' and '_' is dropped; a repeated heading gets -1, -2, ...). Links inside
 *   code (fenced blocks, `spans`) are text, not links; absolute URLs are not checked.
 * - Every `tapegrad SUBCOMMAND ...` command line the pages show (in a fenced block or a `span`,
 *   also as ./build/tapegrad or behind an environment or mpirun) names a subcommand the program
 *   has, and only flags that `tapegrad SUBCOMMAND --help` lists: the program is asked.
 * - No measured figure stands outside docs/results.md and the README's results table: a number
 *   with a rate (tokens/s, GFLOP/s, MB/s, ...), with a duration (ms, s, min, ...), a speed-up
 *   ("1.5x faster"), or a size on a line about RSS. A duration that is a setting (a timeout, a
 *   default) is allowed by name below. */
#include <criterion/criterion.h>
#include <ctype.h>
#include <stdarg.h>
#include <dirent.h>
#include <regex.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>

enum { README_MAX_LINES = 120, PAGE_MAX_LINES = 300, PATH_CAP = 4096, MAX_ANCHORS = 1024, ANCHOR_CAP = 256,
       MAX_PAGES = 64 };

/* The pages checked, relative to the source tree; the .md files of docs/ are added from the folder. */
static const char *const fixed_pages[] = {"README.md", "CHANGELOG.md", "bench/README.md", "tests/README.md",
                                          "tests/parity/README.md"};
/* The dated log of measurements: its figures and commands are true of the commits it names. */
static const char *const results_log = "docs/results.md";
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

/* The checked pages: the fixed ones, then every .md file of docs/. */
static int list_pages(char pages[MAX_PAGES][PATH_CAP]) {
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
        cr_assert_lt(n_pages, MAX_PAGES, "too many pages");
        fmt_into(pages[n_pages++], PATH_CAP, "docs/%s", e->d_name);
    }
    closedir(d);
    return n_pages;
}

static int count_lines(const char *text) {
    int lines = 0;
    for (const char *c = text; *c; c++) lines += *c == '\n';
    return lines;
}

Test(docs, the_readme_fits_a_first_read) {
    char *text = read_page("README.md");
    int lines = count_lines(text);
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
    static char pages[MAX_PAGES][PATH_CAP];
    int n_pages = list_pages(pages);
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

Test(docs, every_page_of_docs_fits_in_300_lines) {
    static char pages[MAX_PAGES][PATH_CAP];
    int n_pages = list_pages(pages), checked = 0;
    for (int i = 0; i < n_pages; i++) {
        if (strncmp(pages[i], "docs/", 5) != 0 || strcmp(pages[i], results_log) == 0) continue;
        char *text = read_page(pages[i]);
        int lines = count_lines(text);
        cr_expect_leq(lines, PAGE_MAX_LINES, "%s has %d lines; at most %d: split it by topic, or move figures to %s",
                      pages[i], lines, PAGE_MAX_LINES, results_log);
        free(text);
        checked++;
    }
    cr_expect_geq(checked, 10, "only %d pages of docs/ found", checked);
}

/* ---------------------------------------------------------------- documented commands */

/* What `tapegrad KEY --help` prints (KEY: "", "train", "ckpt export", ...), asked once. */
typedef struct {
    char key[64];
    char *text;
    bool ok; /* exited 0 */
} Help;
static Help helps[64];
static int n_helps;

static char *run_capture(const char *cmd, bool *ok) {
    FILE *p = popen(cmd, "r");
    cr_assert_not_null(p, "cannot run %s", cmd);
    size_t cap = 1 << 14, len = 0, got;
    char *out = malloc(cap);
    cr_assert_not_null(out);
    while ((got = fread(out + len, 1, cap - len - 1, p)) > 0) {
        len += got;
        if (cap - len - 1 == 0) {
            cap *= 2;
            out = realloc(out, cap);
            cr_assert_not_null(out);
        }
    }
    out[len] = '\0';
    int status = pclose(p);
    *ok = status != -1 && WIFEXITED(status) && WEXITSTATUS(status) == 0;
    return out;
}

static const Help *help_of(const char *key) {
    for (int i = 0; i < n_helps; i++)
        if (strcmp(helps[i].key, key) == 0) return &helps[i];
    cr_assert_lt(n_helps, 64, "too many subcommands");
    Help *h = &helps[n_helps++];
    fmt_into(h->key, sizeof h->key, "%s", key);
    char cmd[PATH_CAP];
    fmt_into(cmd, sizeof cmd, "'%s' %s --help 2>&1 </dev/null", TAPEGRAD_BIN, key);
    h->text = run_capture(cmd, &h->ok);
    return h;
}

/* A word of the program's own kind: lowercase letters, digits and '-', starting with a letter. */
static bool is_word(const char *w, size_t n) {
    if (n == 0 || !islower((unsigned char)w[0])) return false;
    for (size_t i = 0; i < n; i++)
        if (!islower((unsigned char)w[i]) && !isdigit((unsigned char)w[i]) && w[i] != '-') return false;
    return true;
}

/* The subcommands `tapegrad --help` lists ("  name   what it does" under "subcommands:"). */
static bool is_subcommand(const char *name) {
    const Help *h = help_of("");
    cr_assert(h->ok, "%s --help failed:\n%s", TAPEGRAD_BIN, h->text);
    const char *list = strstr(h->text, "subcommands:");
    cr_assert_not_null(list, "tapegrad --help lists no subcommands");
    size_t n = strlen(name);
    for (const char *at = strstr(list, "\n  "); at; at = strstr(at + 1, "\n  ")) {
        const char *w = at + 3;
        if (strncmp(w, name, n) == 0 && w[n] == ' ') return true;
    }
    return false;
}

/* Whether `tapegrad SUB --help` shows usage lines "tapegrad SUB WORD ..." with WORD one of its
 * own subcommands (ckpt: info, export, merge), and whether `word` is one. */
static bool has_subsubcommands(const char *sub, const char *word, bool *is_one) {
    const Help *h = help_of(sub);
    char prefix[96];
    fmt_into(prefix, sizeof prefix, "tapegrad %s ", sub);
    bool any = false;
    *is_one = false;
    for (const char *at = strstr(h->text, prefix); at; at = strstr(at + 1, prefix)) {
        const char *w = at + strlen(prefix);
        size_t n = strspn(w, "abcdefghijklmnopqrstuvwxyz0123456789-");
        if (!is_word(w, n) || (w[n] != ' ' && w[n] != '\n')) continue;
        any = true;
        if (word && strlen(word) == n && strncmp(w, word, n) == 0) *is_one = true;
    }
    return any;
}

/* Whether `flag` is one of the flags `tapegrad KEY --help` lists: on an option line
 * ("  --flag ...") or in a usage line. */
static bool help_has_flag(const char *key, const char *flag) {
    if (strcmp(flag, "--help") == 0) return true;
    const Help *h = help_of(key);
    if (!h->ok) return false;
    size_t n = strlen(flag);
    for (const char *line = h->text; *line;) {
        const char *end = strchr(line, '\n');
        size_t len = end ? (size_t)(end - line) : strlen(line);
        bool option_line = strncmp(line, "  --", 4) == 0;
        bool usage_line = strncmp(line, "usage:", 6) == 0 || strncmp(line, "       tapegrad", 15) == 0;
        if (option_line || usage_line)
            for (const char *at = line; (at = strstr(at, flag)) && at < line + len; at++) {
                char after = at[n];
                if ((at == line || !isalnum((unsigned char)at[-1])) && !isalnum((unsigned char)after) && after != '-')
                    return true;
            }
        line += len + (end != NULL);
    }
    return false;
}

/* One token of a command line: [start, start + len). */
typedef struct {
    const char *start;
    size_t len;
} Token;

static bool token_is(Token t, const char *s) { return t.len == strlen(s) && strncmp(t.start, s, t.len) == 0; }

/* Splits a command that starts at `at` into tokens, up to where the command ends: a shell
 * separator or redirection, a comment, a code span's end, or two spaces (the description column
 * of a usage list). A '|' that a flag follows is a usage line's alternative, not a pipe. */
static int command_tokens(const char *at, Token *tokens, int cap) {
    int n = 0;
    while (*at && n < cap) {
        if (at[0] == ' ' && at[1] == ' ') break;
        while (*at == ' ') at++;
        if (!*at || *at == '`' || *at == '#') break;
        size_t len = strcspn(at, " `");
        Token t = {at, len};
        if (token_is(t, ";") || token_is(t, "&&") || token_is(t, "||") || token_is(t, "&") || *at == '>' ||
            *at == '<' || strncmp(at, "2>", 2) == 0)
            break;
        if (token_is(t, "|")) {
            const char *next = at + 1;
            while (*next == ' ') next++;
            if (strncmp(next, "--", 2) != 0 && strncmp(next, "[--", 3) != 0) break;
            at += len;
            continue;
        }
        tokens[n++] = t;
        if (at[len - 1] == ';') break;
        at += len;
    }
    return n;
}

/* Whether the "tapegrad" at `at` begins a command: at the start of `code`, as a path
 * (./build/tapegrad), or after environment assignments ("TAPEGRAD_ISA=avx2"), a "$ " prompt or
 * a program that runs another (mpirun, perf, qemu, ...). Elsewhere it is a word of a sentence. */
static bool begins_command(const char *code, const char *at) {
    static const char *const launchers[] = {"mpirun", "perf", "qemu-x86_64", "time", "/usr/bin/time", "env", "nohup",
                                            "sudo", "valgrind", "gdb"};
    if (at > code && at[-1] == '/') return true;
    for (const char *p = code; p < at;) {
        while (p < at && (*p == ' ' || *p == '\t')) p++;
        if (p >= at) break;
        size_t n = strcspn(p, " \t");
        if (p + n > at) n = (size_t)(at - p);
        bool env = n > 1 && memchr(p, '=', n) && (isupper((unsigned char)*p) || *p == '_');
        bool prompt = n == 1 && *p == '$';
        for (size_t i = 0; i < sizeof launchers / sizeof launchers[0]; i++)
            if (strlen(launchers[i]) == n && strncmp(p, launchers[i], n) == 0) return true;
        if (!env && !prompt) return false;
        p += n;
    }
    return true;
}

/* Checks every `tapegrad ...` command of one piece of code (a line of a fenced block, or a code
 * span); prints each fault as PAGE:LINE and returns their number. */
static int check_commands(const char *page, int lineno, const char *code) {
    int bad = 0;
    for (const char *at = strstr(code, "tapegrad"); at; at = strstr(at + 1, "tapegrad")) {
        char before = at == code ? ' ' : at[-1];
        if (!strchr(" \t/`($=", before) || at[8] != ' ' || !begins_command(code, at)) continue;
        Token tokens[128];
        int n = command_tokens(at + 9, tokens, 128);
        if (n == 0) continue;
        char first[128];
        fmt_into(first, sizeof first, "%.*s", (int)(tokens[0].len < 127 ? tokens[0].len : 127), tokens[0].start);
        if (strncmp(first, "--", 2) == 0) { /* tapegrad --help, --version */
            char cmd[PATH_CAP];
            size_t fl = strspn(first, "-abcdefghijklmnopqrstuvwxyz");
            first[fl] = '\0';
            fmt_into(cmd, sizeof cmd, "'%s' %s >/dev/null 2>&1 </dev/null", TAPEGRAD_BIN, first);
            bool ok;
            free(run_capture(cmd, &ok));
            if (!ok) {
                fprintf(stderr, "%s:%d: `tapegrad %s`: the program has no such flag\n", page, lineno, first);
                bad++;
            }
            continue;
        }
        size_t fl = strlen(first);
        while (fl > 0 && strchr(",.)", first[fl - 1])) first[--fl] = '\0';
        if (fl == 0 || first[fl - 1] == ':') continue; /* a message: "tapegrad train: ..." */
        /* the subcommand, or alternatives "info|export"; anything else (SUBCOMMAND, 0.3.0) is a
         * placeholder or not a command */
        char keys[8][64];
        int n_keys = 0;
        bool words = true;
        for (char *alt = first; *alt && words;) {
            size_t a = strcspn(alt, "|");
            words = is_word(alt, a) && a < 64 && n_keys < 8;
            if (words) fmt_into(keys[n_keys++], 64, "%.*s", (int)a, alt);
            alt += a + (alt[a] == '|');
        }
        if (!words || n_keys == 0) continue;
        int from = 1;
        bool ok_sub = true;
        for (int k = 0; k < n_keys; k++)
            if (!is_subcommand(keys[k])) {
                fprintf(stderr, "%s:%d: `tapegrad %s`: the program has no subcommand '%s' (tapegrad --help)\n", page,
                        lineno, first, keys[k]);
                bad++;
                ok_sub = false;
            }
        if (!ok_sub) continue;
        /* a subcommand of its own subcommands: `ckpt export ...` */
        if (n_keys == 1) {
            char second[128] = "";
            if (n > 1) fmt_into(second, sizeof second, "%.*s", (int)(tokens[1].len < 127 ? tokens[1].len : 127),
                                tokens[1].start);
            bool is_one = false;
            bool second_word = n > 1 && is_word(second, strcspn(second, "|"));
            if (has_subsubcommands(keys[0], NULL, &is_one) && second_word) {
                char sub[64];
                fmt_into(sub, sizeof sub, "%s", keys[0]);
                n_keys = 0;
                for (char *alt = second; *alt;) {
                    size_t a = strcspn(alt, "|");
                    char word[64];
                    fmt_into(word, sizeof word, "%.*s", (int)(a < 63 ? a : 63), alt);
                    has_subsubcommands(sub, word, &is_one);
                    if (!is_one) {
                        fprintf(stderr, "%s:%d: `tapegrad %s %s`: '%s' is not one of what `tapegrad %s --help` lists\n",
                                page, lineno, sub, second, word, sub);
                        bad++;
                    } else if (n_keys < 8) {
                        fmt_into(keys[n_keys++], 64, "%s %s", sub, word);
                    }
                    alt += a + (alt[a] == '|');
                }
                if (n_keys == 0) continue;
                from = 2;
            }
        }
        for (int i = from; i < n; i++) {
            const char *t = tokens[i].start;
            size_t len = tokens[i].len;
            while (len > 0 && strchr("[('\"", *t)) t++, len--;
            if (len < 3 || strncmp(t, "--", 2) != 0) continue;
            if (!islower((unsigned char)t[2])) continue; /* "---", "--" */
            size_t fn = 2 + strspn(t + 2, "abcdefghijklmnopqrstuvwxyz0123456789-");
            char flag[96];
            fmt_into(flag, sizeof flag, "%.*s", (int)(fn < 95 ? fn : 95), t);
            bool known = false;
            for (int k = 0; k < n_keys && !known; k++) known = help_has_flag(keys[k], flag);
            if (!known) {
                fprintf(stderr, "%s:%d: `tapegrad %s ... %s`: `tapegrad %s --help` lists no %s\n", page, lineno,
                        keys[0], flag, keys[0], flag);
                bad++;
            }
        }
    }
    return bad;
}

/* Runs check_commands over every fenced-block line (backslash continuations joined) and every
 * code span of a text; *commands counts the commands seen. */
static int check_text_commands(const char *page, const char *text, int *commands) {
    char line[16384], joined[32768] = "";
    int bad = 0, lineno = 0, joined_at = 0;
    bool in_code = false;
    for (const char *cursor = text; next_line(&cursor, line, sizeof line);) {
        lineno++;
        if (is_fence(line)) {
            in_code = !in_code;
            continue;
        }
        if (in_code) {
            size_t n = strlen(line);
            bool continued = n > 0 && line[n - 1] == '\\';
            if (continued) line[n - 1] = ' ';
            if (!joined[0]) joined_at = lineno;
            fmt_into(joined + strlen(joined), sizeof joined - strlen(joined), "%s", line);
            if (continued) continue;
            for (const char *c = strstr(joined, "tapegrad "); c; c = strstr(c + 1, "tapegrad ")) (*commands)++;
            bad += check_commands(page, joined_at, joined);
            joined[0] = '\0';
            continue;
        }
        for (char *open = strchr(line, '`'); open;) {
            size_t ticks = strspn(open, "`");
            char *close = strstr(open + ticks, ticks == 1 ? "`" : "``");
            if (!close) break;
            char span[16384];
            fmt_into(span, sizeof span, "%.*s", (int)(close - open - (ptrdiff_t)ticks), open + ticks);
            for (const char *c = strstr(span, "tapegrad "); c; c = strstr(c + 1, "tapegrad ")) (*commands)++;
            bad += check_commands(page, lineno, span);
            open = strchr(close + ticks, '`');
        }
    }
    return bad;
}

/* The pages whose commands are the program's: all but the log, whose commands are those of the
 * commits it names, and the changelog, which records old names. */
static bool commands_checked(const char *page) {
    return strcmp(page, results_log) != 0 && strcmp(page, "CHANGELOG.md") != 0;
}

Test(docs, every_documented_command_is_one_the_program_has, .timeout = 120) {
    static char pages[MAX_PAGES][PATH_CAP];
    int n_pages = list_pages(pages), bad = 0, commands = 0;
    for (int i = 0; i < n_pages; i++) {
        if (!commands_checked(pages[i])) continue;
        char *text = read_page(pages[i]);
        bad += check_text_commands(pages[i], text, &commands);
        free(text);
    }
    cr_expect_eq(bad, 0, "%d documented commands name a subcommand or a flag the program lacks (listed above)", bad);
    /* a checker that found no command would pass anything */
    cr_expect_geq(commands, 100, "only %d `tapegrad ...` commands found in the pages", commands);
}

/* The checker itself, on made-up lines: it must refuse a flag, a subcommand and a sub-subcommand
 * the program lacks, and accept real ones. */
Test(docs, the_command_checker_refuses_what_the_program_lacks, .timeout = 60) {
    int commands = 0;
    cr_expect_eq(check_text_commands("planted", "```sh\n./build/tapegrad train --preset tiny --steps 5 --no-such-flag 3\n```\n",
                                     &commands),
                 1, "a wrong flag of train passed");
    cr_expect_eq(check_text_commands("planted", "Run `tapegrad frobnicate --steps 5` first.\n", &commands), 1,
                 "a wrong subcommand passed");
    cr_expect_eq(check_text_commands("planted", "`tapegrad ckpt export RUN --gguf f.gguf --gguf-type f16 --peft-dir x`\n",
                                     &commands),
                 1, "a wrong flag of ckpt export passed");
    cr_expect_eq(check_text_commands("planted", "`tapegrad ckpt explode RUN`\n", &commands), 1,
                 "a wrong subcommand of ckpt passed");
    cr_expect_eq(check_text_commands("planted", "```\nTAPEGRAD_ISA=avx2 ./build/tapegrad bench --preset small \\\n"
                                                "    --json --steps 3 | tee out   # a comment --nope\n```\n",
                                     &commands),
                 0, "a right command was refused");
    cr_expect_eq(check_text_commands("planted", "`tapegrad chat --run DIR [--system TEXT] [--message TEXT | --jsonl]`, "
                                                "`tapegrad --version`, `tapegrad train: --batch 5 needs ...`\n",
                                     &commands),
                 0, "a usage line, a top-level flag or a message was refused");
    cr_expect_eq(check_text_commands("planted", "`tapegrad --frobnicate`\n", &commands), 1, "a wrong top-level flag passed");
}

/* ---------------------------------------------------------------- measured figures */

/* A number followed by a rate, a duration or a speed-up; and a size on a line about RSS. */
static const char *const figure_patterns[] = {
    "[0-9]([0-9,.]*[0-9])?[ ]?[A-Za-z]+/s([^A-Za-z0-9_]|$)",
    "[0-9]([0-9,.]*[0-9])?[ ]?(ns|us|µs|ms|s|sec|secs|second|seconds|min|mins|minute|minutes|h|hours?)([^A-Za-z0-9_]|$)",
    "[0-9]([0-9,.]*[0-9])?[ ]?(x|%| times) (faster|slower)",
    "RSS.*[0-9]([0-9,.]*[0-9])?[ ]?(kB|KB|KiB|MB|MiB|GB|GiB)([^A-Za-z]|$)",
};

/* Durations that are settings, not measurements, allowed on the page that gives them. */
static const struct {
    const char *page, *phrase;
} setting_phrases[] = {
    {"docs/data-parallel.md", "for 300 s (in MPI_Alltoallv"}, /* the message of --comm-timeout's default */
    {"docs/reliability.md", "for 600 seconds"},               /* a fuzz campaign's length per harness */
    {"docs/reliability.md", "for 30 seconds"},                /* CI's fuzz run per harness */
    {"docs/engine.md", "50 us between jobs"},           /* the pool's spin before it sleeps */
    {"planted", "at most 30 s"},
};

/* Prints, and counts, every figure of a text that the rule forbids. */
static int check_figures(const char *page, const char *text) {
    static regex_t patterns[sizeof figure_patterns / sizeof figure_patterns[0]];
    static bool compiled;
    if (!compiled) {
        for (size_t i = 0; i < sizeof figure_patterns / sizeof figure_patterns[0]; i++)
            cr_assert_eq(regcomp(&patterns[i], figure_patterns[i], REG_EXTENDED), 0, "pattern %zu", i);
        compiled = true;
    }
    bool readme = strcmp(page, "README.md") == 0, in_results = false, in_code = false;
    char line[16384];
    int bad = 0, lineno = 0;
    for (const char *cursor = text; next_line(&cursor, line, sizeof line);) {
        lineno++;
        if (is_fence(line)) in_code = !in_code;
        if (!in_code && line[0] == '#') in_results = readme && strcmp(line, "## Results") == 0;
        if (in_results && line[0] == '|') continue; /* the README's table of headline results */
        for (size_t i = 0; i < sizeof setting_phrases / sizeof setting_phrases[0]; i++) {
            if (strcmp(setting_phrases[i].page, page) != 0) continue;
            for (char *at = strstr(line, setting_phrases[i].phrase); at; at = strstr(at, setting_phrases[i].phrase))
                memset(at, ' ', strlen(setting_phrases[i].phrase));
        }
        for (size_t i = 0; i < sizeof figure_patterns / sizeof figure_patterns[0]; i++) {
            regmatch_t m;
            if (regexec(&patterns[i], line, 1, &m, 0) != 0) continue;
            fprintf(stderr, "%s:%d: a measured figure, \"%.*s\": give it a dated entry in %s and link to it\n", page,
                    lineno, (int)(m.rm_eo - m.rm_so), line + m.rm_so, results_log);
            bad++;
            break;
        }
    }
    return bad;
}

Test(docs, measured_figures_stand_only_in_the_results_log) {
    static char pages[MAX_PAGES][PATH_CAP];
    int n_pages = list_pages(pages), bad = 0;
    for (int i = 0; i < n_pages; i++) {
        if (strcmp(pages[i], results_log) == 0) continue;
        char *text = read_page(pages[i]);
        bad += check_figures(pages[i], text);
        free(text);
    }
    cr_expect_eq(bad, 0, "%d lines outside %s hold a measured figure (listed above)", bad, results_log);
}

/* The rule itself, on made-up lines. */
Test(docs, the_figure_rule_sees_rates_durations_and_speedups) {
    const char *caught[] = {"It trained at 3,400 tokens/s here.", "GEMMs at 187 GFLOP/s", "reads 28.3 MB/s",
                            "training took 911 s", "a step of 139.2 ms", "in 41.3 minutes", "1.54x faster than fp32",
                            "peak RSS 237 MB", "| small | 3 min 55 s |"};
    for (size_t i = 0; i < sizeof caught / sizeof caught[0]; i++)
        cr_expect_eq(check_figures("planted", caught[i]), 1, "\"%s\" passed the rule", caught[i]);
    const char *allowed[] = {"`--comm-timeout` seconds (default 300)", "16 x 128 tokens, 1500 steps",
                             "the test waits at most 30 s", "a 64 MiB line", "N s, ETA N", "dims 64 and 192"};
    for (size_t i = 0; i < sizeof allowed / sizeof allowed[0]; i++)
        cr_expect_eq(check_figures("planted", allowed[i]), 0, "\"%s\" was taken for a measured figure", allowed[i]);
}
