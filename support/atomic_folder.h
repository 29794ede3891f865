/* Publishing a folder whole, as support/atomic_file.h publishes a file: the folder is filled under a
 * temporary name beside its target and renamed into place in one step, so that a reader, or a
 * crash at any moment, finds either no folder at the target or the whole one, never one being
 * filled. `tapegrad prepare` publishes its dataset folders so.
 *
 *   1. tg_atomic_folder_open makes a new folder "<path>.tmp-XXXXXX" beside the target (six
 *      random letters or digits) with mkdir(2), which never takes a name that exists, a link
 *      included, and gives the permissions any new folder gets (0777 less the umask);
 *   2. the caller writes its files into af->temp;
 *   3. tg_atomic_folder_commit renames it onto the target, then fsyncs the parent folder so that
 *      the rename survives a power cut. rename(2) replaces an empty folder in the same step and
 *      refuses a folder that holds anything: *taken then says so, and the temporary folder stays
 *      as it was, for the caller to commit under another name or to abandon;
 *   4. tg_atomic_folder_abandon removes the temporary folder and the files in it.
 * A name ending in ".tmp-XXXXXX" is therefore only ever what a writer that died left.
 *
 * A run folder (run/run_folder.h) fits the same steps: tg_atomic_folder_open(af, "runs/x") for a
 * new run; at the commit, a generated name that another run took meanwhile is tried again as
 * tg_atomic_folder_commit(af, "runs/x-2", &taken); a folder that --out names and that already
 * exists gets its temporary folder inside it (tg_atomic_folder_open(af, "runs/x/run")), whose
 * files the run moves up one by one before tg_atomic_folder_abandon removes what is left.
 */
#ifndef TAPEGRAD_SUPPORT_ATOMIC_FOLDER_H
#define TAPEGRAD_SUPPORT_ATOMIC_FOLDER_H

#include <stdbool.h>

#include "tapegrad/error.h"
#include "tapegrad/limits.h"

typedef struct TgAtomicFolder {
    char path[TG_PATH_CAP]; /* the target: where the last commit put the folder, or will */
    char temp[TG_PATH_CAP]; /* the folder being filled; "" once committed or abandoned */
} TgAtomicFolder;

/* Makes the temporary folder for `path`, whose parent folder must exist (tg_make_folders).
 * TG_ERR_ARG for a path too long to take the suffix, TG_ERR_IO when the folder cannot be made;
 * on failure nothing was made and af->temp is "". */
TgStatus tg_atomic_folder_open(TgAtomicFolder *af, const char *path);
/* Renames the temporary folder to `path` (NULL: the path af was opened with, else af->path
 * becomes `path`; it must sit in the same file system, as beside the first one) and fsyncs its
 * parent folder. An empty folder at `path` is replaced; a folder there that holds anything is
 * refused (TG_ERR_IO, with *taken true when taken is not NULL), as is any other failure of the
 * rename: the temporary folder is then left as it was. */
TgStatus tg_atomic_folder_commit(TgAtomicFolder *af, const char *path, bool *taken);
/* Removes the temporary folder and the files in it (the callers write files only, no folders);
 * nothing once it was committed. */
void tg_atomic_folder_abandon(TgAtomicFolder *af);

#endif
