/* The one check of the paths commands write to (see output_check.h). */
#include "run/output_check.h"

#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "support/path.h"
#include "run/run_folder.h"

void tg_output_plan_init(TgOutputPlan *plan) { plan->n_outputs = plan->n_inputs = 0; }

void tg_output_plan_input(TgOutputPlan *plan, const char *path) {
    struct stat st;
    if (plan->n_inputs == TG_OUTPUT_PLAN_MAX_INPUTS || stat(path, &st) != 0) return;
    plan->inputs[plan->n_inputs].dev = st.st_dev;
    plan->inputs[plan->n_inputs].ino = st.st_ino;
    snprintf(plan->inputs[plan->n_inputs].path, TG_PATH_CAP, "%s", path);
    plan->n_inputs++;
}

/* The last component of a path ("" when it ends in '/'). */
static const char *name_of(const char *path) {
    const char *slash = strrchr(path, '/');
    return slash ? slash + 1 : path;
}

/* The path with its folder resolved (symlinks, "..", "."), so that two spellings of one file
 * compare equal; a folder that does not exist yet is resolved from its nearest existing parent. */
static TgStatus canonical_path(const char *path, char *out, size_t cap, int depth) {
    char folder[TG_PATH_CAP], real[PATH_MAX];
    tg_path_folder(path, folder, sizeof folder);
    const char *name = name_of(path);
    if (realpath(folder, real)) return tg_path_join(out, cap, real, name);
    /* the folder is missing (made by the export): resolve what exists of it */
    if (depth > 64 || strcmp(folder, path) == 0 || strcmp(folder, ".") == 0 || strcmp(folder, "/") == 0)
        return tg_path_format(out, cap, "%s", path);
    char parent[TG_PATH_CAP];
    TG_TRY(canonical_path(folder, parent, sizeof parent, depth + 1));
    return tg_path_join(out, cap, parent, name);
}

static const char *kind_of(mode_t mode) {
    if (S_ISLNK(mode)) return "a symbolic link";
    if (S_ISFIFO(mode)) return "a FIFO";
    if (S_ISCHR(mode) || S_ISBLK(mode)) return "a device";
    if (S_ISSOCK(mode)) return "a socket";
    if (S_ISDIR(mode)) return "a folder";
    return "not a regular file";
}

TgStatus tg_output_check(TgOutputPlan *plan, const char *what, const char *path, bool force) {
    if (!path[0]) return tg_fail(TG_ERR_ARG, "%s needs a file name", what);
    const char *name = name_of(path);
    if (!name[0] || strcmp(name, ".") == 0 || strcmp(name, "..") == 0)
        return tg_fail(TG_ERR_ARG, "%s %s names a folder; give the path of a file", what, path);
    char canonical[TG_PATH_CAP], folder[TG_PATH_CAP];
    TgStatus s = canonical_path(path, canonical, sizeof canonical, 0);
    if (s != TG_OK) return tg_fail(TG_ERR_ARG, "%s %.200s: %s", what, path, tg_error_message());
    tg_path_folder(canonical, folder, sizeof folder);

    /* a run's own file, whether it exists yet or not, and whatever --force says */
    const char *role;
    if (tg_run_file_name(name, &role) && tg_run_folder_is_run(folder)) {
        char given[TG_PATH_CAP];
        tg_path_folder(path, given, sizeof given);
        return tg_fail(TG_ERR_ARG,
                       "%s %s is %s of the run in %s; no command writes over a run's files, even with `force`: give "
                       "another path",
                       what, path, role, given);
    }

    struct stat st;
    if (lstat(path, &st) == 0) {
        if (S_ISLNK(st.st_mode))
            return tg_fail(TG_ERR_ARG, "%s %s is a symbolic link; no output is written through one: remove it or give another path",
                           what, path);
        if (!S_ISREG(st.st_mode))
            return tg_fail(TG_ERR_ARG, "%s %s is %s, not a file; give the path of a file", what, path, kind_of(st.st_mode));
        for (int i = 0; plan && i < plan->n_inputs; i++)
            if (plan->inputs[i].dev == st.st_dev && plan->inputs[i].ino == st.st_ino)
                return tg_fail(TG_ERR_ARG, "%s %s is %s, which this command reads; give another path", what, path,
                               plan->inputs[i].path);
        if (!force)
            return tg_fail(TG_ERR_ARG, "%s %s exists; add `force` to replace it, or give another path", what, path);
    } else if (errno != ENOENT) {
        return tg_fail(TG_ERR_ARG, "%s %s: %s; give another path", what, path, strerror(errno));
    }

    if (!plan) return TG_OK;
    for (int i = 0; i < plan->n_outputs; i++)
        if (strcmp(plan->outputs[i].canonical, canonical) == 0)
            return tg_fail(TG_ERR_ARG, "%s %s: %s would be the same file; give each output its own path",
                           plan->outputs[i].what, plan->outputs[i].path, what);
    TG_CHECK(plan->n_outputs < TG_OUTPUT_PLAN_MAX_OUTPUTS, "more than %d outputs in one command", TG_OUTPUT_PLAN_MAX_OUTPUTS);
    snprintf(plan->outputs[plan->n_outputs].what, sizeof plan->outputs[0].what, "%s", what);
    snprintf(plan->outputs[plan->n_outputs].path, TG_PATH_CAP, "%s", path);
    memcpy(plan->outputs[plan->n_outputs].canonical, canonical, TG_PATH_CAP);
    plan->n_outputs++;
    return TG_OK;
}

TgStatus tg_output_check_folder(const char *what, const char *path) {
    if (!path[0]) return tg_fail(TG_ERR_ARG, "%s needs a folder name", what);
    struct stat st;
    if (stat(path, &st) != 0) {
        if (errno == ENOENT) return TG_OK; /* made when written */
        return tg_fail(TG_ERR_ARG, "%s %s: %s; give another folder", what, path, strerror(errno));
    }
    if (!S_ISDIR(st.st_mode))
        return tg_fail(TG_ERR_ARG, "%s %s is %s, not a folder; give a folder", what, path,
                       S_ISREG(st.st_mode) ? "a file" : kind_of(st.st_mode));
    if (tg_run_folder_is_run(path))
        return tg_fail(TG_ERR_ARG, "%s %s is a run folder; give a folder of its own, outside the run", what, path);
    return TG_OK;
}
