#include "inspect/report.h"

#include "support/atomic_file.h"
#include "support/json_write.h"
#include "support/setting_names.h"

#include <errno.h>
#include <ctype.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct TgReportSeries {
    char *name;
    int color;
    bool dashed;
    int64_t n, cap;
    double *x, *y;
    double *lo, *hi; /* the band around y (NaN where a point has none); NULL until a point has one */
};

struct TgReportChart {
    char *title, *x_label, *y_label;
    bool log_y, log_x;
    int n_series, cap_series;
    TgReportSeries **series; /* pointers, so a series handed out stays valid as more are added */
};

struct TgReportTable {
    char *caption;
    int n_cols;
    char **header;
    int64_t n_cells, cap_cells;
    char **cells;
};

typedef enum { ITEM_HEADING, ITEM_TEXT, ITEM_TABLE, ITEM_CHART } ItemKind;
typedef struct {
    ItemKind kind;
    char *text;
    TgReportTable *table;
    TgReportChart *chart;
} ReportItem;

struct TgReport {
    char *title;
    int n_items, cap_items;
    ReportItem *items;
};

/* A tab10-like palette: distinguishable, and readable on white. */
static const char *const palette[TG_REPORT_PALETTE_SIZE] = {"#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd",
                                                         "#8c564b", "#e377c2", "#7f7f7f", "#bcbd22", "#17becf"};

static char *dup_string(const char *s) {
    size_t n = strlen(s) + 1;
    char *d = tg_malloc(n);
    memcpy(d, s, n);
    return d;
}

static char *vformat(const char *fmt, va_list ap) {
    va_list copy;
    va_copy(copy, ap);
    int n = vsnprintf(NULL, 0, fmt, copy);
    va_end(copy);
    char *s = tg_malloc((size_t)(n > 0 ? n : 0) + 1);
    vsnprintf(s, (size_t)(n > 0 ? n : 0) + 1, fmt, ap);
    return s;
}

/* ---------------------------------------------------------------- building */

TgReport *tg_report_new(const char *title) {
    TgReport *r = tg_calloc(1, sizeof *r);
    r->title = dup_string(title);
    return r;
}

static ReportItem *add_item(TgReport *r, ItemKind kind) {
    if (r->n_items == r->cap_items) {
        r->cap_items = r->cap_items ? 2 * r->cap_items : 16;
        r->items = tg_realloc(r->items, (size_t)r->cap_items * sizeof *r->items);
    }
    ReportItem *it = &r->items[r->n_items++];
    memset(it, 0, sizeof *it);
    it->kind = kind;
    return it;
}

void tg_report_heading(TgReport *r, const char *text) { add_item(r, ITEM_HEADING)->text = dup_string(text); }

/* A paragraph names settings as the messages do (support/setting_names.h): by their flags in the
 * program's report. */
void tg_report_text(TgReport *r, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    char *text = vformat(fmt, ap);
    va_end(ap);
    size_t cap = strlen(text) * 2 + 64;
    char *named = tg_malloc(cap);
    add_item(r, ITEM_TEXT)->text = dup_string(tg_setting_names(text, named, cap));
    free(named), free(text);
}

TgReportTable *tg_report_table(TgReport *r, const char *caption, int n_cols, const char *const *header) {
    TgReportTable *t = tg_calloc(1, sizeof *t);
    t->caption = dup_string(caption ? caption : "");
    t->n_cols = n_cols;
    t->header = tg_calloc((size_t)n_cols, sizeof *t->header);
    for (int i = 0; i < n_cols; i++) t->header[i] = dup_string(header[i]);
    add_item(r, ITEM_TABLE)->table = t;
    return t;
}

void tg_report_cell(TgReportTable *t, const char *fmt, ...) {
    if (t->n_cells == t->cap_cells) {
        t->cap_cells = t->cap_cells ? 2 * t->cap_cells : 64;
        t->cells = tg_realloc(t->cells, (size_t)t->cap_cells * sizeof *t->cells);
    }
    va_list ap;
    va_start(ap, fmt);
    t->cells[t->n_cells++] = vformat(fmt, ap);
    va_end(ap);
}

TgReportChart *tg_report_chart(TgReport *r, const char *title, const char *x_label, const char *y_label, bool log_y) {
    TgReportChart *c = tg_calloc(1, sizeof *c);
    c->title = dup_string(title);
    c->x_label = dup_string(x_label);
    c->y_label = dup_string(y_label);
    c->log_y = log_y;
    add_item(r, ITEM_CHART)->chart = c;
    return c;
}

void tg_report_chart_log_x(TgReportChart *c) { c->log_x = true; }

TgReportSeries *tg_report_series(TgReportChart *c, const char *name, int color, bool dashed) {
    if (c->n_series == c->cap_series) {
        c->cap_series = c->cap_series ? 2 * c->cap_series : 8;
        c->series = tg_realloc(c->series, (size_t)c->cap_series * sizeof *c->series);
    }
    TgReportSeries *s = tg_calloc(1, sizeof *s);
    s->name = dup_string(name);
    s->color = ((color % TG_REPORT_PALETTE_SIZE) + TG_REPORT_PALETTE_SIZE) % TG_REPORT_PALETTE_SIZE;
    s->dashed = dashed;
    c->series[c->n_series++] = s;
    return s;
}

void tg_report_point_range(TgReportSeries *s, double x, double y, double lo, double hi) {
    if (!isfinite(x) || !isfinite(y)) return;
    bool ranged = isfinite(lo) && isfinite(hi);
    if (ranged && !s->lo) {
        s->lo = tg_malloc((size_t)(s->cap ? s->cap : 1) * sizeof *s->lo);
        s->hi = tg_malloc((size_t)(s->cap ? s->cap : 1) * sizeof *s->hi);
        for (int64_t j = 0; j < s->n; j++) s->lo[j] = s->hi[j] = NAN;
    }
    if (s->n == s->cap) {
        s->cap = s->cap ? 2 * s->cap : 64;
        s->x = tg_realloc(s->x, (size_t)s->cap * sizeof *s->x);
        s->y = tg_realloc(s->y, (size_t)s->cap * sizeof *s->y);
        if (s->lo) {
            s->lo = tg_realloc(s->lo, (size_t)s->cap * sizeof *s->lo);
            s->hi = tg_realloc(s->hi, (size_t)s->cap * sizeof *s->hi);
        }
    }
    s->x[s->n] = x;
    s->y[s->n] = y;
    if (s->lo) s->lo[s->n] = ranged ? lo : NAN, s->hi[s->n] = ranged ? hi : NAN;
    s->n++;
}

void tg_report_point(TgReportSeries *s, double x, double y) { tg_report_point_range(s, x, y, NAN, NAN); }

int64_t tg_report_series_length(const TgReportSeries *s) { return s->n; }

void tg_report_free(TgReport *r) {
    if (!r) return;
    for (int i = 0; i < r->n_items; i++) {
        ReportItem *it = &r->items[i];
        free(it->text);
        if (it->table) {
            for (int j = 0; j < it->table->n_cols; j++) free(it->table->header[j]);
            for (int64_t j = 0; j < it->table->n_cells; j++) free(it->table->cells[j]);
            free(it->table->header);
            free(it->table->cells);
            free(it->table->caption);
            free(it->table);
        }
        if (it->chart) {
            for (int j = 0; j < it->chart->n_series; j++) {
                TgReportSeries *s = it->chart->series[j];
                free(s->name);
                free(s->x);
                free(s->y);
                free(s->lo);
                free(s->hi);
                free(s);
            }
            free(it->chart->series);
            free(it->chart->title);
            free(it->chart->x_label);
            free(it->chart->y_label);
            free(it->chart);
        }
    }
    free(r->items);
    free(r->title);
    free(r);
}

/* ---------------------------------------------------------------- SVG charts
 * Inline <svg> in HTML needs no xmlns attribute, and leaving it out keeps the file free of any
 * URL at all. */

static void write_escaped(FILE *f, const char *s) {
    for (; *s; s++) {
        switch (*s) {
        case '<': fputs("&lt;", f); break;
        case '>': fputs("&gt;", f); break;
        case '&': fputs("&amp;", f); break;
        case '"': fputs("&quot;", f); break;
        default: fputc(*s, f);
        }
    }
}

/* Geometry of a chart, in SVG pixels. */
enum { CHART_W = 560, PLOT_LEFT = 66, PLOT_RIGHT = 548, PLOT_TOP = 30, PLOT_BOTTOM = 250, LEGEND_TOP = 296,
       LEGEND_ROW = 16, LEGEND_COLS = 3 };

/* A step of 1, 2 or 5 times a power of ten giving about `target` intervals over `range`. */
static double nice_step(double range, int target) {
    double raw = range / target, mag = pow(10.0, floor(log10(raw))), f = raw / mag;
    return (f < 1.5 ? 1.0 : f < 3.0 ? 2.0 : f < 7.0 ? 5.0 : 10.0) * mag;
}

typedef struct {
    double lo, hi;
} Range;

/* Data coordinates to pixels: the plot's ranges and the scale of each axis. */
typedef struct {
    Range x, y;
    double xstep, ystep, sx, sy;
    bool log_y;
} ChartScale;

static double chart_y(const TgReportChart *c, double y) { return c->log_y ? log10(y) : y; }
static double chart_x(const TgReportChart *c, double x) { return c->log_x ? log10(x) : x; }
/* A point a log axis can show (the y given, x that of series s's point j). */
static bool chart_point_ok(const TgReportChart *c, double y) { return !c->log_y || y > 0; }
static bool chart_x_ok(const TgReportChart *c, double x) { return !c->log_x || x > 0; }
static double px(const ChartScale *k, double x) { return PLOT_LEFT + (x - k->x.lo) * k->sx; }
static double py(const ChartScale *k, double y) { return PLOT_BOTTOM - (y - k->y.lo) * k->sy; }

static bool band_point_ok(const TgReportChart *c, const TgReportSeries *s, int64_t j) {
    return s->lo && chart_x_ok(c, s->x[j]) && isfinite(s->lo[j]) && isfinite(s->hi[j]) && chart_point_ok(c, s->lo[j]) &&
           chart_point_ok(c, s->hi[j]);
}

static void widen(Range *r, bool *any, double v) {
    if (!*any) *r = (Range){v, v};
    r->lo = fmin(r->lo, v), r->hi = fmax(r->hi, v);
    *any = true;
}

/* The ranges of every point and band edge the chart can show. */
static bool data_ranges(const TgReportChart *c, Range *x, Range *y) {
    bool any_x = false, any_y = false;
    for (int i = 0; i < c->n_series; i++) {
        const TgReportSeries *s = c->series[i];
        for (int64_t j = 0; j < s->n; j++) {
            if (!chart_x_ok(c, s->x[j])) continue;
            if (chart_point_ok(c, s->y[j])) widen(x, &any_x, chart_x(c, s->x[j])), widen(y, &any_y, chart_y(c, s->y[j]));
            if (band_point_ok(c, s, j)) {
                widen(x, &any_x, chart_x(c, s->x[j]));
                widen(y, &any_y, chart_y(c, s->lo[j]));
                widen(y, &any_y, chart_y(c, s->hi[j]));
            }
        }
    }
    return any_y;
}

static ChartScale chart_scale(const TgReportChart *c, bool *any) {
    ChartScale k = {.x = {0, 1}, .y = {0, 1}, .log_y = c->log_y};
    *any = data_ranges(c, &k.x, &k.y);
    /* one x (a single point, one evaluation): from 0 to it, as a run's steps count; half a decade
     * either side on a log axis */
    if (k.x.hi - k.x.lo <= 0) {
        if (c->log_x) k.x.lo -= 0.5, k.x.hi += 0.5;
        else if (k.x.lo > 0) k.x.lo = 0;
        else if (k.x.lo < 0) k.x.hi = 0;
        else k.x.hi = 1;
    }
    if (c->log_y) {
        k.y.lo = floor(k.y.lo), k.y.hi = ceil(k.y.hi);
        if (k.y.hi <= k.y.lo) k.y.hi = k.y.lo + 1;
        k.ystep = k.y.hi - k.y.lo > 8 ? 2 : 1;
    } else {
        /* one y (a flat series): 0 to 1 for all zeros (no axis below a count that cannot be
         * negative); 10% either side otherwise, never crossing zero */
        if (k.y.hi - k.y.lo <= 0) {
            double v = k.y.lo, pad = fabs(v) * 0.1;
            if (v == 0) k.y.hi = 1;
            else k.y.lo = v > 0 ? fmax(0, v - pad) : v - pad, k.y.hi = v < 0 ? fmin(0, v + pad) : v + pad;
        }
        k.ystep = nice_step(k.y.hi - k.y.lo, 5);
        k.y.lo = floor(k.y.lo / k.ystep) * k.ystep, k.y.hi = ceil(k.y.hi / k.ystep) * k.ystep;
    }
    k.xstep = nice_step(k.x.hi - k.x.lo, 6);
    k.sx = (PLOT_RIGHT - PLOT_LEFT) / (k.x.hi - k.x.lo), k.sy = (PLOT_BOTTOM - PLOT_TOP) / (k.y.hi - k.y.lo);
    return k;
}

/* How many ticks lo, lo + step, ... fit up to hi, at most MAX_TICKS. The ticks are counted, not
 * stepped: `v += step` stops moving once step is below the rounding gap at v (steps 1e17 and
 * 1e17 + 32 give a tick step of 5 where doubles are 16 apart), and that loop never ends. */
enum { MAX_TICKS = 64 };
static int tick_count(double lo, double hi, double step) {
    double n = floor((hi - lo) / step + 1e-6) + 1;
    return isfinite(n) && n > 0 ? (int)fmin(n, MAX_TICKS) : 0;
}

static void format_tick(char *buf, size_t cap, double v, double step) {
    if (fabs(v) < step * 1e-9) v = 0; /* no "-1.4e-17" for zero */
    snprintf(buf, cap, "%.4g", v);
}

static void write_x_tick(FILE *f, const ChartScale *k, double v, const char *label) {
    fprintf(f, "<line x1=\"%.1f\" y1=\"%d\" x2=\"%.1f\" y2=\"%d\" stroke=\"#e4e4e4\"/>"
               "<text x=\"%.1f\" y=\"%d\" text-anchor=\"middle\">%s</text>\n",
            px(k, v), PLOT_TOP, px(k, v), PLOT_BOTTOM, px(k, v), PLOT_BOTTOM + 15, label);
}

/* A log x axis's ticks at the values a reader expects: m x 10^d for m in 1, 2, 5 (1 alone over
 * more than three decades, 1 to 9 within one), labelled with the value. */
static void write_log_x_ticks(FILE *f, const ChartScale *k) {
    static const double all[] = {1, 2, 3, 4, 5, 6, 7, 8, 9}, some[] = {1, 2, 5}, one[] = {1};
    double decades = k->x.hi - k->x.lo;
    const double *m = decades > 3 ? one : decades > 1 ? some : all;
    int n_m = decades > 3 ? 1 : decades > 1 ? 3 : 9, ticks = 0;
    char label[32];
    for (double d = floor(k->x.lo); d <= ceil(k->x.hi) && ticks < MAX_TICKS; d++)
        for (int i = 0; i < n_m; i++) {
            double v = log10(m[i]) + d;
            if (v < k->x.lo - 1e-9 || v > k->x.hi + 1e-9) continue;
            snprintf(label, sizeof label, "%g", m[i] * pow(10.0, d));
            write_x_tick(f, k, v, label);
            ticks++;
        }
}

/* Grid lines, tick labels, the frame and the axis labels. */
static void write_axes(FILE *f, const TgReportChart *c, const ChartScale *k) {
    char label[32];
    for (int i = 0, n = tick_count(k->y.lo, k->y.hi, k->ystep); i < n; i++) {
        double v = k->y.lo + i * k->ystep;
        if (c->log_y) snprintf(label, sizeof label, "%g", pow(10.0, v));
        else format_tick(label, sizeof label, v, k->ystep);
        fprintf(f, "<line x1=\"%d\" y1=\"%.1f\" x2=\"%d\" y2=\"%.1f\" stroke=\"#e4e4e4\"/>"
                   "<text x=\"%d\" y=\"%.1f\" text-anchor=\"end\">%s</text>\n",
                PLOT_LEFT, py(k, v), PLOT_RIGHT, py(k, v), PLOT_LEFT - 4, py(k, v) + 4, label);
    }
    if (c->log_x) {
        write_log_x_ticks(f, k);
    } else {
        double first_x = ceil(k->x.lo / k->xstep) * k->xstep;
        for (int i = 0, n = tick_count(first_x, k->x.hi, k->xstep); i < n; i++) {
            double v = first_x + i * k->xstep;
            format_tick(label, sizeof label, v, k->xstep);
            write_x_tick(f, k, v, label);
        }
    }
    fprintf(f, "<rect x=\"%d\" y=\"%d\" width=\"%d\" height=\"%d\" fill=\"none\" stroke=\"#888888\"/>\n", PLOT_LEFT,
            PLOT_TOP, PLOT_RIGHT - PLOT_LEFT, PLOT_BOTTOM - PLOT_TOP);
    fprintf(f, "<text x=\"%d\" y=\"%d\" text-anchor=\"middle\">", (PLOT_LEFT + PLOT_RIGHT) / 2, PLOT_BOTTOM + 32);
    write_escaped(f, c->x_label);
    fputs(c->log_x ? " (log)" : "", f);
    fprintf(f, "</text><text x=\"14\" y=\"%d\" text-anchor=\"middle\" transform=\"rotate(-90 14 %d)\">",
            (PLOT_TOP + PLOT_BOTTOM) / 2, (PLOT_TOP + PLOT_BOTTOM) / 2);
    write_escaped(f, c->y_label);
    fputs(c->log_y ? " (log)</text>\n" : "</text>\n", f);
}

/* A series' band: one closed outline (along hi, back along lo) per run of points that have a
 * range the axis can show. */
static void write_band(FILE *f, const TgReportChart *c, const ChartScale *k, const TgReportSeries *s) {
    fputs("<path data-band=\"", f);
    write_escaped(f, s->name);
    fputs("\" d=\"", f);
    for (int64_t start = 0; start < s->n;) {
        if (!band_point_ok(c, s, start)) {
            start++;
            continue;
        }
        int64_t end = start;
        while (end + 1 < s->n && band_point_ok(c, s, end + 1)) end++;
        for (int64_t j = start; j <= end; j++)
            fprintf(f, "%s%.1f,%.1f ", j == start ? "M" : "L", px(k, chart_x(c, s->x[j])), py(k, chart_y(c, s->hi[j])));
        for (int64_t j = end; j >= start; j--) fprintf(f, "L%.1f,%.1f ", px(k, chart_x(c, s->x[j])), py(k, chart_y(c, s->lo[j])));
        fputs("Z ", f);
        start = end + 1;
    }
    fprintf(f, "\" fill=\"%s\" fill-opacity=\"0.18\" stroke=\"none\"/>\n", palette[s->color]);
}

static void write_line(FILE *f, const TgReportChart *c, const ChartScale *k, const TgReportSeries *s) {
    fputs("<path data-series=\"", f);
    write_escaped(f, s->name);
    fputs("\" d=\"", f);
    bool pen_down = false;
    for (int64_t j = 0; j < s->n; j++) {
        if (!chart_point_ok(c, s->y[j]) || !chart_x_ok(c, s->x[j])) {
            pen_down = false; /* a gap where a log axis cannot show the value */
            continue;
        }
        fprintf(f, "%s%.1f,%.1f ", pen_down ? "L" : "M", px(k, chart_x(c, s->x[j])), py(k, chart_y(c, s->y[j])));
        pen_down = true;
    }
    fprintf(f, "\" fill=\"none\" stroke=\"%s\" stroke-width=\"1.6\"%s/>\n", palette[s->color],
            s->dashed ? " stroke-dasharray=\"6 3\"" : "");
    if (s->n <= 30) /* sparse series (val loss, a sweep) also get markers, so one point shows */
        for (int64_t j = 0; j < s->n; j++)
            if (chart_point_ok(c, s->y[j]) && chart_x_ok(c, s->x[j]))
                fprintf(f, "<circle cx=\"%.1f\" cy=\"%.1f\" r=\"2.5\" fill=\"%s\"/>\n", px(k, chart_x(c, s->x[j])),
                        py(k, chart_y(c, s->y[j])), palette[s->color]);
}

static void write_legend(FILE *f, const TgReportChart *c) {
    int col_w = (CHART_W - 16) / LEGEND_COLS;
    for (int i = 0; i < c->n_series; i++) {
        const TgReportSeries *s = c->series[i];
        int x = 8 + (i % LEGEND_COLS) * col_w, y = LEGEND_TOP + (i / LEGEND_COLS) * LEGEND_ROW;
        if (s->lo)
            fprintf(f, "<rect x=\"%d\" y=\"%d\" width=\"22\" height=\"8\" fill=\"%s\" fill-opacity=\"0.18\"/>", x,
                    y - 8, palette[s->color]);
        fprintf(f, "<line x1=\"%d\" y1=\"%d\" x2=\"%d\" y2=\"%d\" stroke=\"%s\" stroke-width=\"2\"%s/>", x, y - 4, x + 22,
                y - 4, palette[s->color], s->dashed ? " stroke-dasharray=\"6 3\"" : "");
        fprintf(f, "<text x=\"%d\" y=\"%d\">", x + 27, y);
        write_escaped(f, s->name);
        fputs(s->n ? "</text>\n" : " (no data)</text>\n", f);
    }
}

/* One chart as inline SVG: frame and axes, the bands, the lines over them, the legend. */
static void write_chart_svg(FILE *f, const TgReportChart *c) {
    int legend_rows = (c->n_series + LEGEND_COLS - 1) / LEGEND_COLS;
    int height = LEGEND_TOP + legend_rows * LEGEND_ROW + 6;
    fprintf(f, "<figure><svg width=\"%d\" height=\"%d\" viewBox=\"0 0 %d %d\" "
               "font-family=\"sans-serif\" font-size=\"11\">\n",
            CHART_W, height, CHART_W, height);
    fprintf(f, "<rect x=\"0\" y=\"0\" width=\"%d\" height=\"%d\" fill=\"#ffffff\"/>\n", CHART_W, height);
    fputs("<text x=\"8\" y=\"18\" font-size=\"13\" font-weight=\"bold\">", f);
    write_escaped(f, c->title);
    fputs("</text>\n", f);
    bool any;
    ChartScale k = chart_scale(c, &any);
    write_axes(f, c, &k);
    if (!any)
        fprintf(f, "<text x=\"%d\" y=\"%d\" text-anchor=\"middle\" fill=\"#888888\">no data</text>\n",
                (PLOT_LEFT + PLOT_RIGHT) / 2, (PLOT_TOP + PLOT_BOTTOM) / 2);
    for (int i = 0; i < c->n_series; i++)
        if (c->series[i]->lo) write_band(f, c, &k, c->series[i]);
    for (int i = 0; i < c->n_series; i++) write_line(f, c, &k, c->series[i]);
    write_legend(f, c);
    fputs("</svg></figure>\n", f);
}

/* ---------------------------------------------------------------- JSON */

/* One series as an object; `chart` (may be NULL) names its chart, for the JSON Lines file. */
static void series_json(TgJsonWriter *w, const TgReportSeries *s, const char *chart) {
    tg_json_open_object(w, NULL);
    tg_json_put_string(w, "name", s->name);
    tg_json_open_array(w, "x");
    for (int64_t j = 0; j < s->n; j++) tg_json_put_number(w, NULL, s->x[j]);
    tg_json_close(w);
    tg_json_open_array(w, "y");
    for (int64_t j = 0; j < s->n; j++) tg_json_put_number(w, NULL, s->y[j]);
    tg_json_close(w);
    if (s->lo) { /* null where the point has no band (JSON has no NaN) */
        tg_json_open_array(w, "lo");
        for (int64_t j = 0; j < s->n; j++) tg_json_put_number(w, NULL, s->lo[j]);
        tg_json_close(w);
        tg_json_open_array(w, "hi");
        for (int64_t j = 0; j < s->n; j++) tg_json_put_number(w, NULL, s->hi[j]);
        tg_json_close(w);
    }
    if (chart) tg_json_put_string(w, "chart", chart);
    tg_json_close(w);
}

static void report_json(TgJsonWriter *w, const TgReport *r) {
    tg_json_open_object(w, NULL);
    tg_json_put_string(w, "title", r->title);
    tg_json_open_array(w, "charts");
    for (int i = 0; i < r->n_items; i++) {
        const TgReportChart *c = r->items[i].chart;
        if (!c) continue;
        tg_json_open_object(w, NULL);
        tg_json_put_string(w, "title", c->title);
        tg_json_put_string(w, "x_label", c->x_label);
        tg_json_put_string(w, "y_label", c->y_label);
        tg_json_put_bool(w, "log_y", c->log_y);
        tg_json_open_array(w, "series");
        for (int j = 0; j < c->n_series; j++) series_json(w, c->series[j], NULL);
        tg_json_close(w);
        tg_json_close(w);
    }
    tg_json_close(w);
    tg_json_open_array(w, "tables");
    for (int i = 0; i < r->n_items; i++) {
        const TgReportTable *t = r->items[i].table;
        if (!t || r->items[i].chart) continue;
        tg_json_open_object(w, NULL);
        tg_json_put_string(w, "caption", t->caption);
        tg_json_open_array(w, "header");
        for (int j = 0; j < t->n_cols; j++) tg_json_put_string(w, NULL, t->header[j]);
        tg_json_close(w);
        tg_json_open_array(w, "rows");
        for (int64_t j = 0; j < t->n_cells; j++) {
            if (j % t->n_cols == 0) {
                if (j > 0) tg_json_close(w);
                tg_json_open_array(w, NULL);
            }
            tg_json_put_string(w, NULL, t->cells[j]);
        }
        if (t->n_cells > 0) tg_json_close(w);
        tg_json_close(w);
        tg_json_close(w);
    }
    tg_json_close(w);
    tg_json_close(w);
}

/* ---------------------------------------------------------------- files */

static void write_table(FILE *f, const TgReportTable *t) {
    fputs("<table>", f);
    if (t->caption[0]) {
        fputs("<caption>", f);
        write_escaped(f, t->caption);
        fputs("</caption>", f);
    }
    fputs("\n<tr>", f);
    for (int j = 0; j < t->n_cols; j++) {
        fputs("<th>", f);
        write_escaped(f, t->header[j]);
        fputs("</th>", f);
    }
    fputs("</tr>\n", f);
    for (int64_t j = 0; j < t->n_cells; j += t->n_cols) {
        fputs("<tr>", f);
        for (int k = 0; k < t->n_cols; k++) {
            /* a figure ("2.8454 ± 0.0198", "0.063 [0.042 - 0.085]") stays on one line; words wrap */
            const char *cell = j + k < t->n_cells ? t->cells[j + k] : "";
            fputs(isdigit((unsigned char)cell[0]) || (cell[0] == '-' && isdigit((unsigned char)cell[1])) ? "<td class=\"n\">"
                                                                                                        : "<td>",
                  f);
            write_escaped(f, cell);
            fputs("</td>", f);
        }
        fputs("</tr>\n", f);
    }
    fputs("</table>\n", f);
}

static const char *const style =
    "body{font-family:sans-serif;margin:18px;color:#222222;background:#ffffff;max-width:1220px}"
    "h1{font-size:21px}h2{font-size:17px;margin-top:26px}p{font-size:14px;max-width:1100px}"
    ".charts{display:flex;flex-wrap:wrap;gap:10px}figure{margin:0;border:1px solid #dddddd}"
    "table{border-collapse:collapse;font-size:13px;margin:8px 0}caption{text-align:left;font-weight:bold;padding:4px 0}"
    "td,th{border:1px solid #cccccc;padding:2px 7px;text-align:right}th{background:#f2f2f2}"
    "td.n{white-space:nowrap}"
    "td:first-child,th:first-child{text-align:left}svg{display:block}";

TgStatus tg_report_write_html(const TgReport *r, const char *path) {
    TgAtomicFile af;
    TG_TRY(tg_atomic_file_open(&af, path));
    FILE *f = tg_atomic_file_stream(&af);
    fputs("<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\"/><title>", f);
    write_escaped(f, r->title);
    fprintf(f, "</title><style>%s</style></head>\n<body>\n<h1>", style);
    write_escaped(f, r->title);
    fputs("</h1>\n", f);
    bool in_charts = false;
    for (int i = 0; i < r->n_items; i++) {
        const ReportItem *it = &r->items[i];
        if (it->kind == ITEM_CHART && !in_charts) fputs("<div class=\"charts\">\n", f);
        if (it->kind != ITEM_CHART && in_charts) fputs("</div>\n", f);
        in_charts = it->kind == ITEM_CHART;
        switch (it->kind) {
        case ITEM_HEADING:
            fputs("<h2>", f);
            write_escaped(f, it->text);
            fputs("</h2>\n", f);
            break;
        case ITEM_TEXT:
            fputs("<p>", f);
            write_escaped(f, it->text);
            fputs("</p>\n", f);
            break;
        case ITEM_TABLE: write_table(f, it->table); break;
        case ITEM_CHART: write_chart_svg(f, it->chart); break;
        }
    }
    if (in_charts) fputs("</div>\n", f);
    /* the numbers, for programs: '<' is written as \u003c so no "</script>" can end the block early */
    fputs("<script type=\"application/json\" id=\"tapegrad-report-data\">", f);
    TgJsonWriter w = tg_json_writer(f, TG_JSON_COMPACT, true);
    report_json(&w, r);
    fputs("</script>\n</body></html>\n", f);
    return tg_atomic_file_commit(&af);
}

TgStatus tg_report_write_series_jsonl(const TgReport *r, const char *path) {
    TgAtomicFile af;
    TG_TRY(tg_atomic_file_open(&af, path));
    FILE *f = tg_atomic_file_stream(&af);
    for (int i = 0; i < r->n_items; i++) {
        const TgReportChart *c = r->items[i].chart;
        if (!c) continue;
        for (int j = 0; j < c->n_series; j++) {
            TgJsonWriter w = tg_json_writer(f, TG_JSON_COMPACT, false);
            series_json(&w, c->series[j], c->title);
            fputc('\n', f);
        }
    }
    return tg_atomic_file_commit(&af);
}
