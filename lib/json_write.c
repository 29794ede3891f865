#include "lib/json_write.h"

#include <math.h>

void json_write_number(FILE *f, double v, int digits) {
    if (isfinite(v)) fprintf(f, "%.*g", digits, v);
    else fputs("null", f);
}

void json_write_field(FILE *f, const char *key, double v, int digits) {
    fprintf(f, ",\"%s\":", key);
    json_write_number(f, v, digits);
}

void json_write_string(FILE *f, const char *s) {
    fputc('"', f);
    for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
        if (*p == '"' || *p == '\\') fprintf(f, "\\%c", *p);
        else if (*p < 0x20) fprintf(f, "\\u%04x", *p);
        else fputc(*p, f);
    }
    fputc('"', f);
}
