/* Self-contained HTML reports: headings, text, tables and line charts drawn as inline SVG.
 *
 * The file needs nothing but a browser: no scripts run, no fonts or styles are fetched, nothing
 * refers to the network. Every chart's data is also embedded, once, as JSON in
 *   <script type="application/json" id="tapegrad-report-data">{"title":..,"charts":[..],"tables":[..]}</script>
 * (a data block, never executed), so a program can read the numbers back without scraping the
 * SVG; each series is drawn as a <path data-series="NAME">, its band (if any) as a
 * <path data-band="NAME">. The markup is XHTML-style: every
 * element is closed or self-closed.
 *
 * Use: tg_report_new, then add items in reading order, then tg_report_write_html (and
 * tg_report_write_series_jsonl for the numbers as JSON lines), then tg_report_free.
 */
#ifndef TAPEGRAD_INSPECT_REPORT_H
#define TAPEGRAD_INSPECT_REPORT_H

#include <stdbool.h>
#include <stdint.h>

#include "tapegrad/error.h"

typedef struct TgReport TgReport;
typedef struct TgReportTable TgReportTable;
typedef struct TgReportChart TgReportChart;
typedef struct TgReportSeries TgReportSeries;

enum { TG_REPORT_PALETTE_SIZE = 10 };

TgReport *tg_report_new(const char *title);
void tg_report_free(TgReport *r);

void tg_report_heading(TgReport *r, const char *text);
void tg_report_text(TgReport *r, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* A table of n_cols columns; cells fill it row by row. */
TgReportTable *tg_report_table(TgReport *r, const char *caption, int n_cols, const char *const *header);
void tg_report_cell(TgReportTable *t, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* Consecutive charts are laid out side by side. log_y: a log10 y axis (points y <= 0 dropped). */
TgReportChart *tg_report_chart(TgReport *r, const char *title, const char *x_label, const char *y_label, bool log_y);
/* A log10 x axis, labelled with the values (a learning rate, say): points with x <= 0 dropped. */
void tg_report_chart_log_x(TgReportChart *c);
/* color: an index into a fixed 10-colour palette (taken modulo its size); dashed: a dashed line. */
TgReportSeries *tg_report_series(TgReportChart *c, const char *name, int color, bool dashed);
/* Non-finite points are skipped: a series holds only what was measured. */
void tg_report_point(TgReportSeries *s, double x, double y);
/* A point with a range [lo, hi] around it (the spread over seeds, say): a series with any such
 * point is drawn over a translucent band of its colour, <path data-band="NAME">, and its data
 * carries "lo" and "hi" arrays (null where a point has no range, as when lo or hi is not finite). */
void tg_report_point_range(TgReportSeries *s, double x, double y, double lo, double hi);
int64_t tg_report_series_length(const TgReportSeries *s);

/* Writes the HTML file (through PATH.tmp and a rename, so it is whole or absent). */
TgStatus tg_report_write_html(const TgReport *r, const char *path);
/* One JSON object per series and line: {"chart":..,"series":..,"x":[..],"y":[..]}. */
TgStatus tg_report_write_series_jsonl(const TgReport *r, const char *path);

#endif
