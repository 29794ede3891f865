/* How the library's messages name a setting, and how a program gives those names its own words.
 *
 * A message of the library (a status's, tapegrad/error.h; a note's, support/messages.h) names a
 * setting in the library's terms: the field of the struct that holds it, between backquotes, as
 * in "`n_heads` 3 does not divide `dim` 64". A program whose users set those fields through flags
 * installs a namer once, before it calls the library, and every message then reads in its words:
 * the tapegrad program's (cli/cli.c) gives each setting its flag from the option table that
 * holds both, "--heads 3 does not divide --dim 64". A name the namer does not know is left as the
 * library wrote it. */
#ifndef TAPEGRAD_SUPPORT_SETTING_NAMES_H
#define TAPEGRAD_SUPPORT_SETTING_NAMES_H

#include <stddef.h>

/* The program's word for the setting named by the `len` bytes at `name` ("--heads" for n_heads),
 * or NULL to keep the name. */
typedef const char *(*TgSettingNamer)(const char *name, size_t len);

/* Installs the namer (NULL: none, the library's names). Once, before any message is made. */
void tg_setting_namer_set(TgSettingNamer namer);
/* The message `text` with every `name` the namer knows replaced by its word, in `buf` (`text`
 * itself when there is no namer or nothing to replace; cut to `cap` bytes). */
const char *tg_setting_names(const char *text, char *buf, size_t cap);

#endif
