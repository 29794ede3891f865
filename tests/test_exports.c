/* The shared library exports exactly the public API: `nm -D --defined-only libtapegrad.so` lists
 * one symbol per function the public headers declare (found by compiling the umbrella header
 * with gcc -aux-info), no other and none missing. The headers compile alone, from the staged copy
 * of what `cmake --install` installs (so a public header that includes an internal one fails
 * here), and the umbrella tapegrad.h includes every one of them. The library's SONAME carries the
 * major version. */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "datagen.h"
#include "tapegrad/version.h"
#include "testutil.h"

#if !defined(TAPEGRAD_SHARED_LIB) || !defined(TAPEGRAD_PUBLIC_INCLUDE) || !defined(TAPEGRAD_PUBLIC_HEADERS) || \
    !defined(TAPEGRAD_C_COMPILER)
#error "CMake passes the shared library, the staged headers, their list and the compiler"
#endif

enum { MAX_NAMES = 1024, NAME_CAP = 128 };

typedef struct {
    char names[MAX_NAMES][NAME_CAP];
    int count;
} NameSet;

static void name_add(NameSet *set, const char *name) {
    for (int i = 0; i < set->count; i++)
        if (strcmp(set->names[i], name) == 0) return;
    cr_assert_lt(set->count, MAX_NAMES, "more than %d names", MAX_NAMES);
    snprintf(set->names[set->count++], NAME_CAP, "%s", name);
}

static bool name_has(const NameSet *set, const char *name) {
    for (int i = 0; i < set->count; i++)
        if (strcmp(set->names[i], name) == 0) return true;
    return false;
}

/* The functions declared in the public headers (their non-static prototypes in gcc's aux-info of
 * a file including the umbrella alone); *per_header[i] counts those of header i of the list. */
static void declared_functions(const char *dir, NameSet *declared, char headers[][NAME_CAP], int n_headers,
                               int *per_header) {
    datagen_write(dir, "all.c", "#include <tapegrad/tapegrad.h>\n", 31);
    char cmd[8192];
    snprintf(cmd, sizeof cmd, "%s -std=c11 -fsyntax-only -aux-info %s/all.aux -I%s %s/all.c",
             TAPEGRAD_C_COMPILER, dir, TAPEGRAD_PUBLIC_INCLUDE, dir);
    cr_assert_eq(test_run(cmd), 0, "the public headers do not compile on their own: %s", cmd);
    char path[4200], line[2048];
    snprintf(path, sizeof path, "%s/all.aux", dir);
    FILE *f = fopen(path, "r");
    cr_assert_not_null(f, "no aux-info from %s", cmd);
    const char *root = TAPEGRAD_PUBLIC_INCLUDE "/tapegrad/";
    while (fgets(line, sizeof line, f)) {
        /* "/ * FILE:LINE:NC * / extern TYPE NAME (ARGS);" */
        const char *file = line + 3;
        if (strncmp(file, root, strlen(root)) != 0) continue;
        const char *decl = strstr(line, "*/ ");
        cr_assert_not_null(decl, "odd aux-info line: %s", line);
        decl += 3;
        if (strncmp(decl, "static ", 7) == 0) continue; /* static inline: not a symbol */
        const char *paren = strstr(decl, " (");
        cr_assert_not_null(paren, "odd aux-info line: %s", line);
        const char *start = paren;
        while (start > decl && (start[-1] == '_' || (start[-1] >= '0' && start[-1] <= '9') ||
                                ((start[-1] | 32) >= 'a' && (start[-1] | 32) <= 'z')))
            start--;
        char name[NAME_CAP];
        snprintf(name, sizeof name, "%.*s", (int)(paren - start), start);
        name_add(declared, name);
        for (int h = 0; h < n_headers; h++) {
            size_t len = strlen(headers[h]);
            if (strncmp(file + strlen(root), headers[h], len) == 0 && file[strlen(root) + len] == ':') per_header[h]++;
        }
    }
    fclose(f);
}

/* The defined dynamic symbols of the shared library. */
static void exported_symbols(NameSet *exported) {
    FILE *p = popen("nm -D --defined-only " TAPEGRAD_SHARED_LIB, "r");
    cr_assert_not_null(p);
    char line[1024], type[8], name[NAME_CAP];
    while (fgets(line, sizeof line, p)) {
        unsigned long long address;
        if (sscanf(line, "%llx %7s %127s", &address, type, name) != 3) continue;
        name_add(exported, name);
    }
    cr_assert_eq(pclose(p), 0, "nm -D failed on %s", TAPEGRAD_SHARED_LIB);
}

Test(exports, the_shared_library_exports_exactly_the_public_functions) {
    char headers[64][NAME_CAP];
    int n_headers = 0;
    char list[] = TAPEGRAD_PUBLIC_HEADERS;
    for (char *h = strtok(list, " ;"); h; h = strtok(NULL, " ;")) snprintf(headers[n_headers++], NAME_CAP, "%s", h);
    cr_assert_gt(n_headers, 10, "only %d public headers listed", n_headers);
    char *dir = datagen_tempdir();
    static NameSet declared, exported;
    int per_header[64] = {0};
    declared_functions(dir, &declared, headers, n_headers, per_header);
    datagen_remove_tree(dir);
    free(dir);
    for (int h = 0; h < n_headers; h++)
        cr_expect_gt(per_header[h], 0, "tapegrad.h does not bring in %s (or it declares no function)", headers[h]);
    exported_symbols(&exported);
    int missing = 0, extra = 0;
    for (int i = 0; i < declared.count; i++)
        if (!name_has(&exported, declared.names[i])) {
            fprintf(stderr, "declared in a public header but not exported: %s\n", declared.names[i]);
            missing++;
        }
    for (int i = 0; i < exported.count; i++)
        if (!name_has(&declared, exported.names[i])) {
            fprintf(stderr, "exported but in no public header: %s\n", exported.names[i]);
            extra++;
        }
    cr_expect_eq(missing, 0, "%d public functions are not exported (listed above)", missing);
    cr_expect_eq(extra, 0, "%d symbols are exported beyond the public API (listed above)", extra);
    cr_expect_eq(exported.count, declared.count, "%d symbols exported, %d functions declared", exported.count,
                 declared.count);
    cr_expect_gt(declared.count, 100, "only %d public functions found: is the aux-info parsed?", declared.count);
}

/* Whether the file holds the bytes of `needle` (strings(1) without its minimum length). */
static bool file_contains(const char *path, const char *needle) {
    FILE *f = fopen(path, "rb");
    cr_assert_not_null(f, "cannot read %s", path);
    size_t n = strlen(needle), matched = 0;
    bool found = false;
    for (int c; !found && (c = fgetc(f)) != EOF;) {
        if ((char)c == needle[matched]) found = ++matched == n;
        else matched = (char)c == needle[0];
    }
    fclose(f);
    return found;
}

/* The faults tests inject (lib/fault.h) live in the test variant alone: neither the installed
 * library nor the installed program reads them from the environment. The variant itself must,
 * or the check above would pass for a wrong reason. */
Test(exports, the_installed_library_and_program_carry_no_fault_injection) {
    const char *faults[] = {"TAPEGRAD_FAIL_WRITE", "TAPEGRAD_FAIL_REPLICA"};
    for (int i = 0; i < 2; i++) {
        cr_expect(!file_contains(TAPEGRAD_SHARED_LIB, faults[i]), "%s reads %s", TAPEGRAD_SHARED_LIB, faults[i]);
        cr_expect(!file_contains(TAPEGRAD_BIN, faults[i]), "%s reads %s", TAPEGRAD_BIN, faults[i]);
        cr_expect(file_contains(TAPEGRAD_FAULT_BIN, faults[i]), "the test variant %s does not read %s",
                  TAPEGRAD_FAULT_BIN, faults[i]);
    }
}

Test(exports, the_soname_carries_the_major_version) {
    FILE *p = popen("readelf -d " TAPEGRAD_SHARED_LIB, "r");
    cr_assert_not_null(p);
    char line[1024], expected[64];
    snprintf(expected, sizeof expected, "[libtapegrad.so.%d]", TG_VERSION_MAJOR);
    bool found = false;
    while (fgets(line, sizeof line, p)) found |= strstr(line, "SONAME") && strstr(line, expected);
    pclose(p);
    cr_expect(found, "no SONAME %s in %s", expected, TAPEGRAD_SHARED_LIB);
}
