#include "tapegrad/version.h"

const char *tg_version(void) { return TG_VERSION; }
