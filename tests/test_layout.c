/* The rooms of the source tree depend on each other one way only:
 *     lib <- ops <- data, train <- inspect <- cli
 * (a room includes headers of its own and of the rooms to its left; data and train do not need
 * each other's left-right order: train reads data, data never reads train). Every project
 * include is written from the top of the tree ("lib/tape.h"), never with "../". */
#include <criterion/criterion.h>
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
    const char *room;
    const char *may_include; /* space-separated rooms */
} Rule;

static const Rule rules[] = {
    {"lib", "lib"},
    {"ops", "lib ops"},
    {"data", "lib ops data"},
    {"train", "lib ops data train"},
    {"inspect", "lib ops data train inspect"},
    {"cli", "lib ops data train inspect cli"},
};

static bool allowed(const Rule *r, const char *target_room) {
    char list[128];
    snprintf(list, sizeof list, " %s ", r->may_include);
    char needle[80];
    snprintf(needle, sizeof needle, " %s ", target_room);
    return strstr(list, needle) != NULL;
}

/* Checks one file; returns the number of violations (each printed). */
static int check_file(const Rule *r, const char *path) {
    FILE *f = fopen(path, "r");
    cr_assert_not_null(f, "cannot read %s", path);
    char line[1024];
    int bad = 0, lineno = 0;
    while (fgets(line, sizeof line, f)) {
        lineno++;
        const char *inc = strstr(line, "#include \"");
        if (inc != line) continue;
        const char *name = inc + 10;
        const char *slash = strchr(name, '/'), *quote = strchr(name, '"');
        if (strncmp(name, "../", 3) == 0 || !slash || (quote && slash > quote)) {
            fprintf(stderr, "%s:%d: include \"%.*s\" is not written from the top of the tree\n", path, lineno,
                    quote ? (int)(quote - name) : 40, name);
            bad++;
            continue;
        }
        char room[64];
        snprintf(room, sizeof room, "%.*s", (int)(slash - name), name);
        if (!allowed(r, room)) {
            fprintf(stderr, "%s:%d: %s/ includes %s/ (the rooms go lib <- ops <- data, train <- inspect <- cli)\n",
                    path, lineno, r->room, room);
            bad++;
        }
    }
    fclose(f);
    return bad;
}

Test(layout, includes_follow_the_rooms) {
    int bad = 0, files = 0;
    for (size_t i = 0; i < sizeof rules / sizeof rules[0]; i++) {
        char dir_path[4096];
        snprintf(dir_path, sizeof dir_path, "%s/%s", TAPEGRAD_SOURCE_DIR, rules[i].room);
        DIR *d = opendir(dir_path);
        cr_assert_not_null(d, "no folder %s", dir_path);
        struct dirent *e;
        while ((e = readdir(d))) {
            size_t n = strlen(e->d_name);
            if (n < 3 || (strcmp(e->d_name + n - 2, ".c") != 0 && strcmp(e->d_name + n - 2, ".h") != 0)) continue;
            char path[8192];
            snprintf(path, sizeof path, "%s/%s", dir_path, e->d_name);
            bad += check_file(&rules[i], path);
            files++;
        }
        closedir(d);
    }
    cr_expect_gt(files, 50, "only %d source files found", files);
    cr_expect_eq(bad, 0, "%d includes break the layering (listed above)", bad);
}
