//! Small self-contained SVG charts, built as strings: line charts over time
//! and grouped bar charts. No fonts, no scripts: text inherits the page's
//! font, colours are literal, and output is deterministic for the same input.

use std::fmt::Write as _;

use crate::html::escape;

/// Colours for series, in order; they cycle when there are more series.
pub const PALETTE: [&str; 8] = [
    "#2563eb", "#dc2626", "#16a34a", "#d97706", "#7c3aed", "#0891b2", "#db2777", "#4b5563",
];

/// The largest magnitude an axis covers; larger figures are clamped to it so
/// that tick arithmetic never overflows to infinity.
const LIMIT: f64 = 1e300;

/// Chart width in SVG units (the page scales it to its column).
const WIDTH: f64 = 640.0;
/// Chart height in SVG units.
const HEIGHT: f64 = 280.0;
/// Room left of the plot for the y tick labels.
const LEFT: f64 = 58.0;
/// Room right of the plot.
const RIGHT: f64 = 14.0;
/// Room below the plot for the x tick labels and the axis title.
const BOTTOM: f64 = 40.0;
/// Height of one legend row.
const LEGEND_ROW: f64 = 18.0;
/// Rough width of one character of 12 px text, for laying out legends.
const CHAR_W: f64 = 7.4;
/// Rough width of one character of the 10 px band labels.
const SMALL_CHAR_W: f64 = 5.6;
/// Height of one row of fault labels.
const FAULT_LANE: f64 = 11.0;
/// Rows of fault labels below the phase labels; more overlapping labels
/// share the row that frees up first (each band's `<title>` still names it).
const FAULT_LANES_MAX: usize = 4;
/// A fault band narrower than this many pixels also gets a marker line, so
/// that it stays visible.
const FAULT_WIDTH_MIN: f64 = 2.0;
/// The legend swatch of the fault bands.
const FAULT_SWATCH: &str = "rgba(234,88,12,0.35)";

/// A linear map from a data interval (the domain) onto a pixel interval.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Scale {
    /// Domain start.
    pub d0: f64,
    /// Domain end.
    pub d1: f64,
    /// Pixel the domain start maps to.
    pub r0: f64,
    /// Pixel the domain end maps to.
    pub r1: f64,
}

impl Scale {
    /// Maps `domain` onto `range`.
    pub fn new(domain: (f64, f64), range: (f64, f64)) -> Self {
        Self {
            d0: domain.0,
            d1: domain.1,
            r0: range.0,
            r1: range.1,
        }
    }

    /// Where `v` lands. An empty or non-finite domain maps everything to the
    /// middle of the range; a non-finite `v` maps to the range start.
    pub fn map(&self, v: f64) -> f64 {
        let span = self.d1 - self.d0;
        if !span.is_finite() || span == 0.0 {
            return (self.r0 + self.r1) / 2.0;
        }
        let f = (v - self.d0) / span;
        let f = if f.is_finite() { f } else { 0.0 };
        self.r0 + f * (self.r1 - self.r0)
    }
}

/// An axis: round tick values, the first and last of which bound it.
#[derive(Debug, Clone, PartialEq)]
pub struct Axis {
    /// Tick values, ascending, evenly spaced by `step`.
    pub ticks: Vec<f64>,
    /// The distance between ticks.
    pub step: f64,
}

impl Axis {
    /// Where the axis starts.
    pub fn lo(&self) -> f64 {
        self.ticks.first().copied().unwrap_or(0.0)
    }

    /// Where the axis ends.
    pub fn hi(&self) -> f64 {
        self.ticks.last().copied().unwrap_or(1.0)
    }

    /// The tick labels, formatted alike (same suffix and decimals).
    pub fn labels(&self) -> Vec<String> {
        let top = self.ticks.iter().fold(0.0_f64, |m, t| m.max(t.abs()));
        self.ticks
            .iter()
            .map(|&t| tick_label(t, self.step, top))
            .collect()
    }
}

/// A round step near `raw`: 1, 2, 2.5 or 5 times a power of ten.
pub fn nice_step(raw: f64) -> f64 {
    if !raw.is_finite() || raw <= 0.0 {
        return 1.0;
    }
    let base = 10f64.powf(raw.log10().floor());
    let f = raw / base;
    let nice = if f <= 1.0 {
        1.0
    } else if f <= 2.0 {
        2.0
    } else if f <= 2.5 {
        2.5
    } else if f <= 5.0 {
        5.0
    } else {
        10.0
    };
    nice * base
}

/// Makes a data interval drawable: non-finite ends become 0, ends are
/// clamped to ±1e300 and ordered, and an empty interval `[v, v]` is widened to
/// span zero (`[0, v]` or `[v, 0]`), or `[0, 1]` when `v` is 0.
pub fn sanitize(lo: f64, hi: f64) -> (f64, f64) {
    let fix = |v: f64| {
        if v.is_finite() {
            v.clamp(-LIMIT, LIMIT)
        } else {
            0.0
        }
    };
    let (mut lo, mut hi) = (fix(lo), fix(hi));
    if lo > hi {
        std::mem::swap(&mut lo, &mut hi);
    }
    if lo == hi {
        (lo, hi) = (lo.min(0.0), hi.max(0.0));
        if lo == hi {
            hi = 1.0;
        }
    }
    (lo, hi)
}

/// An axis covering `[lo, hi]` with about `target` intervals between round ticks.
pub fn axis(lo: f64, hi: f64, target: usize) -> Axis {
    let (lo, hi) = sanitize(lo, hi);
    let step = nice_step((hi - lo) / target.max(1) as f64);
    let start = (lo / step).floor() * step;
    let end = (hi / step).ceil() * step;
    let n = ((end - start) / step).round();
    if !(start.is_finite() && end.is_finite() && (1.0..=100.0).contains(&n)) {
        return Axis {
            ticks: vec![lo, hi],
            step: hi - lo,
        };
    }
    let ticks = (0..=n as usize)
        .map(|i| {
            let t = start + i as f64 * step;
            // Snap float noise (0.30000000000000004) to the step's grid.
            if t.abs() < step * 1e-9 { 0.0 } else { t }
        })
        .collect();
    Axis { ticks, step }
}

/// A tick label: `v` with an SI suffix chosen by `top` (the largest tick) and
/// as many decimals as `step` needs.
pub fn tick_label(v: f64, step: f64, top: f64) -> String {
    if v == 0.0 {
        return "0".to_owned();
    }
    if top >= 1e12 {
        return format!("{v:.1e}");
    }
    let (div, suffix) = if top >= 1e9 {
        (1e9, "G")
    } else if top >= 1e6 {
        (1e6, "M")
    } else if top >= 1e4 {
        (1e3, "k")
    } else {
        (1.0, "")
    };
    let scaled_step = step / div;
    let decimals = if scaled_step > 0.0 && scaled_step.is_finite() {
        (-(scaled_step.log10().floor())).clamp(0.0, 6.0) as usize
    } else {
        0
    };
    // 2.5-steps need one more decimal than their power of ten suggests.
    let decimals =
        if decimals < 6 && (scaled_step * 10f64.powi(decimals as i32)).fract().abs() > 1e-9 {
            decimals + 1
        } else {
            decimals
        };
    format!("{:.*}{suffix}", decimals, v / div)
}

/// One line of a [`LineChart`].
#[derive(Debug, Clone, PartialEq)]
pub struct LineSeries {
    /// The legend's label.
    pub label: String,
    /// Stroke colour (a CSS colour literal).
    pub color: String,
    /// Drawn dashed (the second run in a comparison).
    pub dashed: bool,
    /// `(x, y)` points, x ascending.
    pub points: Vec<(f64, f64)>,
}

/// A shaded stretch of the x axis (a phase of the run).
#[derive(Debug, Clone, PartialEq)]
pub struct Band {
    /// Its label, drawn at the top if it fits.
    pub label: String,
    /// Start, x units.
    pub x0: f64,
    /// End, x units.
    pub x1: f64,
}

/// A fault over a stretch of the x axis, drawn as a translucent band (class
/// `fault`) in front of the phases and behind the lines; an instantaneous
/// one (`x1 <= x0`) is a vertical marker line.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct FaultBand {
    /// The short label drawn at the top (the fault's name).
    pub label: String,
    /// The band's `<title>`: what, where, when, for how long.
    pub title: String,
    /// Start, x units.
    pub x0: f64,
    /// End, x units (`x0` or less: instantaneous).
    pub x1: f64,
    /// The fault could not be carried out (drawn in red, dashed).
    pub failed: bool,
}

/// A horizontal reference line (a threshold), drawn if it falls on the axis.
#[derive(Debug, Clone, PartialEq)]
pub struct Rule {
    /// Its label.
    pub label: String,
    /// Where, y units.
    pub y: f64,
}

/// A line chart over time.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct LineChart {
    /// What it shows (the SVG's accessible name).
    pub title: String,
    /// The x axis' title.
    pub x_label: String,
    /// The y axis' unit, shown top left.
    pub y_label: String,
    /// The lines.
    pub series: Vec<LineSeries>,
    /// Shaded stretches behind the lines.
    pub bands: Vec<Band>,
    /// Faults, drawn over the phase bands and behind the lines.
    pub faults: Vec<FaultBand>,
    /// Reference lines.
    pub rules: Vec<Rule>,
}

/// The x and y extent of every point of `series` (`None` without points).
pub fn extent(series: &[LineSeries]) -> Option<((f64, f64), (f64, f64))> {
    let mut pts = series
        .iter()
        .flat_map(|s| s.points.iter())
        .filter(|(x, y)| x.is_finite() && y.is_finite());
    let &(x, y) = pts.next()?;
    Some(pts.fold(((x, x), (y, y)), |((x0, x1), (y0, y1)), &(x, y)| {
        ((x0.min(x), x1.max(x)), (y0.min(y), y1.max(y)))
    }))
}

/// Lays legend entries out in rows that fit `width`; returns each entry's
/// `(x, row)` and the number of rows.
fn legend_layout(labels: &[&str], width: f64) -> (Vec<(f64, usize)>, usize) {
    let mut out = Vec::with_capacity(labels.len());
    let (mut x, mut row) = (0.0, 0);
    for label in labels {
        let w = 22.0 + label.chars().count() as f64 * CHAR_W + 14.0;
        if x > 0.0 && x + w > width {
            x = 0.0;
            row += 1;
        }
        out.push((x, row));
        x += w;
    }
    let rows = if labels.is_empty() { 0 } else { row + 1 };
    (out, rows)
}

/// The opening `<svg>` tag with the accessible name.
fn open_svg(out: &mut String, title: &str, height: f64) {
    let _ = write!(
        out,
        r#"<svg class="chart" viewBox="0 0 {WIDTH} {height}" width="{WIDTH}" height="{height}" role="img" aria-label="{t}"><title>{t}</title>"#,
        t = escape(title),
    );
}

/// Draws the legend from the top of the chart; returns its height.
fn legend(out: &mut String, entries: &[(&str, &str, bool, bool)]) -> f64 {
    let labels: Vec<&str> = entries.iter().map(|e| e.0).collect();
    let (pos, rows) = legend_layout(&labels, WIDTH - LEFT - RIGHT);
    for ((label, color, dashed, bar), (x, row)) in entries.iter().zip(pos) {
        let x = LEFT + x;
        let y = 12.0 + row as f64 * LEGEND_ROW;
        if *bar {
            let _ = write!(
                out,
                r#"<rect x="{x:.1}" y="{:.1}" width="16" height="10" fill="{c}"/>"#,
                y - 8.0,
                c = escape(color)
            );
        } else {
            let dash = if *dashed {
                r#" stroke-dasharray="5 3""#
            } else {
                ""
            };
            let _ = write!(
                out,
                r#"<line x1="{x:.1}" y1="{:.1}" x2="{:.1}" y2="{:.1}" stroke="{c}" stroke-width="2.5"{dash}/>"#,
                y - 4.0,
                x + 16.0,
                y - 4.0,
                c = escape(color)
            );
        }
        let _ = write!(
            out,
            r#"<text x="{:.1}" y="{y:.1}" class="legend">{}</text>"#,
            x + 22.0,
            escape(label)
        );
    }
    rows as f64 * LEGEND_ROW + 8.0
}

/// Draws horizontal grid lines and y tick labels for `y` between `x0` and `x1`.
fn y_grid(out: &mut String, y_axis: &Axis, ys: &Scale, x0: f64, x1: f64) {
    for (t, label) in y_axis.ticks.iter().zip(y_axis.labels()) {
        let py = ys.map(*t);
        let _ = write!(
            out,
            r#"<line x1="{x0:.1}" y1="{py:.1}" x2="{x1:.1}" y2="{py:.1}" class="grid"/><text x="{:.1}" y="{:.1}" class="tick" text-anchor="end">{}</text>"#,
            x0 - 6.0,
            py + 4.0,
            escape(&label)
        );
    }
}

impl LineChart {
    /// The chart as one `<svg>` element.
    pub fn to_svg(&self) -> String {
        let mut body = String::new();
        let mut entries: Vec<(&str, &str, bool, bool)> = self
            .series
            .iter()
            .map(|s| (s.label.as_str(), s.color.as_str(), s.dashed, false))
            .collect();
        if !self.faults.is_empty() {
            entries.push(("faults", FAULT_SWATCH, false, true));
        }
        let top = legend(&mut body, &entries) + 24.0;
        let (x0, x1) = (LEFT, WIDTH - RIGHT);
        let (y0, y1) = (HEIGHT - BOTTOM, top);
        let mut out = String::new();
        open_svg(&mut out, &self.title, HEIGHT);
        out.push_str(&body);
        let _ = write!(
            out,
            r#"<text x="{:.1}" y="{:.1}" class="unit">{}</text>"#,
            4.0,
            top - 12.0,
            escape(&self.y_label)
        );
        let Some(((dx0, dx1), (dy0, dy1))) = extent(&self.series) else {
            let _ = write!(
                out,
                r#"<rect x="{x0}" y="{y1:.1}" width="{:.1}" height="{:.1}" class="frame"/><text x="{:.1}" y="{:.1}" class="empty" text-anchor="middle">no samples</text></svg>"#,
                x1 - x0,
                y0 - y1,
                (x0 + x1) / 2.0,
                (y0 + y1) / 2.0
            );
            return out;
        };
        let x_axis = axis(dx0.min(0.0), dx1, 8);
        let y_axis = axis(dy0.min(0.0), dy1, 5);
        let xs = Scale::new((x_axis.lo(), x_axis.hi()), (x0, x1));
        let ys = Scale::new((y_axis.lo(), y_axis.hi()), (y0, y1));
        // Phases behind everything, alternately shaded.
        for (i, band) in self.bands.iter().enumerate() {
            let (bx0, bx1) = (xs.map(band.x0).clamp(x0, x1), xs.map(band.x1).clamp(x0, x1));
            if bx1 <= bx0 {
                continue;
            }
            let class = if i % 2 == 0 { "band" } else { "band alt" };
            let _ = write!(
                out,
                r#"<rect x="{bx0:.1}" y="{y1:.1}" width="{:.1}" height="{:.1}" class="{class}"><title>{}</title></rect>"#,
                bx1 - bx0,
                y0 - y1,
                escape(&band.label)
            );
            if band.label.chars().count() as f64 * SMALL_CHAR_W + 6.0 < bx1 - bx0 {
                let _ = write!(
                    out,
                    r#"<text x="{:.1}" y="{:.1}" class="phase">{}</text>"#,
                    bx0 + 3.0,
                    y1 + 11.0,
                    escape(&band.label)
                );
            }
        }
        let fault_labels = fault_bands(&mut out, &self.faults, &xs, (x0, x1), (y0, y1));
        y_grid(&mut out, &y_axis, &ys, x0, x1);
        for (t, label) in x_axis.ticks.iter().zip(x_axis.labels()) {
            let px = xs.map(*t);
            let _ = write!(
                out,
                r#"<line x1="{px:.1}" y1="{y0:.1}" x2="{px:.1}" y2="{:.1}" class="axis"/><text x="{px:.1}" y="{:.1}" class="tick" text-anchor="middle">{}</text>"#,
                y0 + 4.0,
                y0 + 16.0,
                escape(&label)
            );
        }
        let _ = write!(
            out,
            r#"<line x1="{x0}" y1="{y0:.1}" x2="{x1}" y2="{y0:.1}" class="axis"/><text x="{:.1}" y="{:.1}" class="unit" text-anchor="middle">{}</text>"#,
            (x0 + x1) / 2.0,
            HEIGHT - 6.0,
            escape(&self.x_label)
        );
        for rule in &self.rules {
            if !(rule.y.is_finite() && rule.y >= y_axis.lo() && rule.y <= y_axis.hi()) {
                continue;
            }
            let py = ys.map(rule.y);
            let _ = write!(
                out,
                r#"<line x1="{x0}" y1="{py:.1}" x2="{x1}" y2="{py:.1}" class="rule"/><text x="{:.1}" y="{:.1}" class="rule-label" text-anchor="end">{}</text>"#,
                x1 - 4.0,
                py - 4.0,
                escape(&rule.label)
            );
        }
        for s in &self.series {
            let pts: Vec<(f64, f64)> = s
                .points
                .iter()
                .filter(|(x, y)| x.is_finite() && y.is_finite())
                .map(|&(x, y)| (xs.map(x), ys.map(y)))
                .collect();
            let dash = if s.dashed {
                r#" stroke-dasharray="6 4""#
            } else {
                ""
            };
            let color = escape(&s.color);
            if let [(px, py)] = pts.as_slice() {
                let _ = write!(
                    out,
                    r#"<circle cx="{px:.1}" cy="{py:.1}" r="3" fill="{color}"/>"#
                );
                continue;
            }
            let mut path = String::new();
            for (px, py) in &pts {
                let _ = write!(
                    path,
                    "{}{px:.1},{py:.1}",
                    if path.is_empty() { "" } else { " " }
                );
            }
            let _ = write!(
                out,
                r#"<polyline points="{path}" fill="none" stroke="{color}" stroke-width="2" stroke-linejoin="round"{dash}><title>{}</title></polyline>"#,
                escape(&s.label)
            );
        }
        out.push_str(&fault_labels);
        out.push_str("</svg>");
        out
    }
}

/// Where a fault lands on the plot: `(px0, px1)`, clamped to `[x0, x1]`;
/// `px1 == px0` for an instantaneous fault. `None` when it lies wholly
/// outside the axis or is not finite.
fn fault_span(f: &FaultBand, xs: &Scale, (x0, x1): (f64, f64)) -> Option<(f64, f64)> {
    if !(f.x0.is_finite() && f.x1.is_finite()) {
        return None;
    }
    let (lo, hi) = (xs.d0.min(xs.d1), xs.d0.max(xs.d1));
    let end = f.x1.max(f.x0);
    if end < lo || f.x0 > hi {
        return None;
    }
    let px0 = xs.map(f.x0).clamp(x0, x1);
    let px1 = if f.x1 > f.x0 {
        xs.map(f.x1).clamp(x0, x1)
    } else {
        px0
    };
    Some((px0, px1))
}

/// Gives each label, spanning `[start, end)` pixels, the first row free at
/// its start, up to [`FAULT_LANES_MAX`] rows; with every row taken it shares
/// the row that frees up first. Labels in input order, rows from 0.
fn label_lanes(spans: &[(f64, f64)]) -> Vec<usize> {
    let mut order: Vec<usize> = (0..spans.len()).collect();
    order.sort_by(|&a, &b| spans[a].0.total_cmp(&spans[b].0).then(a.cmp(&b)));
    let mut lane_ends: Vec<f64> = Vec::new();
    let mut lanes = vec![0; spans.len()];
    for i in order {
        let (start, end) = spans[i];
        let lane = match lane_ends.iter().position(|&e| e <= start) {
            Some(l) => l,
            None if lane_ends.len() < FAULT_LANES_MAX => {
                lane_ends.push(f64::NEG_INFINITY);
                lane_ends.len() - 1
            }
            None => lane_ends
                .iter()
                .enumerate()
                .min_by(|a, b| a.1.total_cmp(b.1))
                .map_or(0, |(l, _)| l),
        };
        lane_ends[lane] = end;
        lanes[i] = lane;
    }
    lanes
}

/// Draws the faults: a translucent band each (a marker line when
/// instantaneous) with its `<title>`. Returns their labels, each in the
/// first free row below the phase labels, for drawing over the lines (so
/// that they stay readable), in the bands' order, in one `<g
/// class="fault-labels">`. `(x0, x1)` and `(y0, y1)` bound the plot.
fn fault_bands(
    out: &mut String,
    faults: &[FaultBand],
    xs: &Scale,
    (x0, x1): (f64, f64),
    (y0, y1): (f64, f64),
) -> String {
    let placed: Vec<(&FaultBand, (f64, f64))> = faults
        .iter()
        .filter_map(|f| fault_span(f, xs, (x0, x1)).map(|s| (f, s)))
        .collect();
    // Each label starts at its band and runs right, or ends at the band's
    // end when it would run off the plot.
    let label_spans: Vec<(f64, f64)> = placed
        .iter()
        .map(|(f, (px0, px1))| {
            let w = f.label.chars().count() as f64 * SMALL_CHAR_W + 6.0;
            if px0 + w <= x1 {
                (*px0, px0 + w)
            } else {
                (px1 - w, *px1)
            }
        })
        .collect();
    let lanes = label_lanes(&label_spans);
    let mut labels = String::new();
    for (((f, (px0, px1)), (lx0, lx1)), lane) in placed.iter().zip(&label_spans).zip(lanes) {
        let class = if f.failed { "fault failed" } else { "fault" };
        let _ = write!(
            out,
            r#"<g class="{class}"><title>{}</title>"#,
            escape(&f.title)
        );
        let width = px1 - px0;
        if f.x1 > f.x0 {
            let _ = write!(
                out,
                r#"<rect x="{px0:.1}" y="{y1:.1}" width="{width:.1}" height="{:.1}" class="fault-band"/>"#,
                y0 - y1
            );
        }
        if f.x1 <= f.x0 || width < FAULT_WIDTH_MIN {
            let _ = write!(
                out,
                r#"<line x1="{px0:.1}" y1="{y1:.1}" x2="{px0:.1}" y2="{y0:.1}" class="fault-mark"/>"#
            );
        }
        let ly = y1 + 11.0 + FAULT_LANE * (lane + 1) as f64;
        let (tx, anchor) = if *lx0 >= *px0 {
            (lx0 + 3.0, "start")
        } else {
            (lx1 - 3.0, "end")
        };
        out.push_str("</g>");
        let _ = write!(
            labels,
            r#"<text x="{tx:.1}" y="{ly:.1}" class="fault-label{}" text-anchor="{anchor}"><title>{}</title>{}</text>"#,
            if f.failed { " failed" } else { "" },
            escape(&f.title),
            escape(&f.label)
        );
    }
    if labels.is_empty() {
        labels
    } else {
        format!(r#"<g class="fault-labels">{labels}</g>"#)
    }
}

/// One series of a [`BarChart`]: a value per category.
#[derive(Debug, Clone, PartialEq)]
pub struct BarSeries {
    /// The legend's label.
    pub label: String,
    /// Fill colour.
    pub color: String,
    /// One value per category (missing ones are drawn as 0).
    pub values: Vec<f64>,
}

/// A grouped bar chart: for each category, one bar per series.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct BarChart {
    /// What it shows.
    pub title: String,
    /// The y axis' unit.
    pub y_label: String,
    /// The categories along the x axis.
    pub categories: Vec<String>,
    /// The bars.
    pub series: Vec<BarSeries>,
}

impl BarChart {
    /// The chart as one `<svg>` element.
    pub fn to_svg(&self) -> String {
        let mut body = String::new();
        let entries: Vec<(&str, &str, bool, bool)> = self
            .series
            .iter()
            .map(|s| (s.label.as_str(), s.color.as_str(), false, true))
            .collect();
        let top = legend(&mut body, &entries) + 24.0;
        let (x0, x1) = (LEFT, WIDTH - RIGHT);
        let (y0, y1) = (HEIGHT - BOTTOM, top);
        let mut out = String::new();
        open_svg(&mut out, &self.title, HEIGHT);
        out.push_str(&body);
        let _ = write!(
            out,
            r#"<text x="4" y="{:.1}" class="unit">{}</text>"#,
            top - 12.0,
            escape(&self.y_label)
        );
        let max = self
            .series
            .iter()
            .flat_map(|s| s.values.iter())
            .copied()
            .filter(|v| v.is_finite())
            .fold(0.0_f64, f64::max);
        let y_axis = axis(0.0, max, 5);
        let ys = Scale::new((y_axis.lo(), y_axis.hi()), (y0, y1));
        y_grid(&mut out, &y_axis, &ys, x0, x1);
        let n = self.categories.len();
        if n == 0 || self.series.is_empty() {
            let _ = write!(
                out,
                r#"<text x="{:.1}" y="{:.1}" class="empty" text-anchor="middle">no data</text></svg>"#,
                (x0 + x1) / 2.0,
                (y0 + y1) / 2.0
            );
            return out;
        }
        let group = (x1 - x0) / n as f64;
        let bar = group * 0.8 / self.series.len() as f64;
        for (c, name) in self.categories.iter().enumerate() {
            let gx = x0 + c as f64 * group;
            for (k, s) in self.series.iter().enumerate() {
                let v = s
                    .values
                    .get(c)
                    .copied()
                    .filter(|v| v.is_finite())
                    .unwrap_or(0.0);
                let v = v.clamp(0.0, y_axis.hi());
                let (top_y, base) = (ys.map(v), ys.map(0.0));
                let _ = write!(
                    out,
                    r#"<rect x="{:.1}" y="{top_y:.1}" width="{:.1}" height="{:.1}" fill="{}"><title>{}: {} {}</title></rect>"#,
                    gx + group * 0.1 + k as f64 * bar,
                    (bar - 1.0).max(0.5),
                    (base - top_y).max(0.0),
                    escape(&s.color),
                    escape(name),
                    escape(&s.label),
                    escape(&crate::figures::fmt_num(v))
                );
            }
            let _ = write!(
                out,
                r#"<text x="{:.1}" y="{:.1}" class="tick" text-anchor="middle">{}</text>"#,
                gx + group / 2.0,
                y0 + 16.0,
                escape(name)
            );
        }
        let _ = write!(
            out,
            r#"<line x1="{x0}" y1="{y0:.1}" x2="{x1}" y2="{y0:.1}" class="axis"/></svg>"#
        );
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn line(points: Vec<(f64, f64)>) -> LineChart {
        LineChart {
            title: "t".into(),
            x_label: "s".into(),
            y_label: "ms".into(),
            series: vec![LineSeries {
                label: "a".into(),
                color: "#000".into(),
                dashed: false,
                points,
            }],
            bands: vec![],
            faults: vec![],
            rules: vec![],
        }
    }

    #[test]
    fn scale_maps_ends_and_middle() {
        let s = Scale::new((0.0, 10.0), (100.0, 0.0));
        assert_eq!(s.map(0.0), 100.0);
        assert_eq!(s.map(10.0), 0.0);
        assert_eq!(s.map(5.0), 50.0);
        // Empty domain: the middle of the range, never NaN.
        assert_eq!(Scale::new((3.0, 3.0), (0.0, 10.0)).map(3.0), 5.0);
        assert_eq!(Scale::new((0.0, 1.0), (0.0, 10.0)).map(f64::NAN), 0.0);
    }

    #[test]
    fn nice_steps() {
        assert_eq!(nice_step(0.7), 1.0);
        assert_eq!(nice_step(1.3), 2.0);
        assert_eq!(nice_step(2.2), 2.5);
        assert_eq!(nice_step(3.0), 5.0);
        assert_eq!(nice_step(7.0), 10.0);
        assert_eq!(nice_step(420.0), 500.0);
        assert_eq!(nice_step(0.0), 1.0);
        assert_eq!(nice_step(f64::NAN), 1.0);
    }

    #[test]
    fn axis_covers_data_with_round_ticks() {
        let a = axis(0.0, 4671.1, 5);
        assert_eq!(a.step, 1000.0);
        assert_eq!(a.ticks, vec![0.0, 1000.0, 2000.0, 3000.0, 4000.0, 5000.0]);
        assert_eq!(
            a.labels(),
            vec!["0", "1000", "2000", "3000", "4000", "5000"]
        );
        let a = axis(0.0, 88.137, 8);
        assert_eq!(a.step, 20.0);
        assert_eq!(a.hi(), 100.0);
        let a = axis(0.0, 0.3, 3);
        assert_eq!(a.ticks, vec![0.0, 0.1, 0.2, 0.30000000000000004]);
        assert_eq!(a.labels(), vec!["0", "0.1", "0.2", "0.3"]);
        let a = axis(0.0, 24895.0, 5);
        assert_eq!(a.labels(), vec!["0", "5k", "10k", "15k", "20k", "25k"]);
        let a = axis(0.0, 12.0, 5);
        assert_eq!(a.step, 2.5);
        assert_eq!(a.labels()[1], "2.5");
    }

    #[test]
    fn axis_of_all_zero_and_single_values() {
        // All zero: a unit axis, not a division by zero.
        let a = axis(0.0, 0.0, 5);
        assert_eq!(a.lo(), 0.0);
        assert_eq!(a.hi(), 1.0);
        assert!(a.ticks.len() >= 2);
        // One value: the axis spans zero to it.
        let a = axis(7.0, 7.0, 5);
        assert_eq!((a.lo(), a.hi()), (0.0, 8.0));
        let a = axis(-3.0, -3.0, 5);
        assert!(a.lo() <= -3.0 && a.hi() == 0.0);
    }

    #[test]
    fn axis_of_huge_and_non_finite_values() {
        let a = axis(0.0, 1e18, 5);
        assert_eq!(a.hi(), 1e18);
        assert!(a.labels().iter().skip(1).all(|l| l.contains('e')));
        for (lo, hi) in [
            (0.0, f64::MAX),
            (-f64::MAX, f64::MAX),
            (f64::NAN, f64::INFINITY),
        ] {
            let a = axis(lo, hi, 5);
            assert!(a.ticks.len() >= 2, "{lo} {hi}");
            assert!(
                a.ticks.iter().all(|t| t.is_finite()),
                "{lo} {hi}: {:?}",
                a.ticks
            );
            assert!(a.step.is_finite() && a.step > 0.0);
        }
        assert_eq!(tick_label(2.5e9, 5e8, 3e9), "2.5G");
        assert_eq!(tick_label(1_500_000.0, 500_000.0, 2e6), "1.5M");
        assert_eq!(tick_label(-0.0, 1.0, 1.0), "0");
    }

    #[test]
    fn empty_timeline_says_so() {
        let svg = line(vec![]).to_svg();
        assert!(svg.starts_with("<svg") && svg.ends_with("</svg>"));
        assert!(svg.contains("no samples"));
        assert!(!svg.contains("NaN") && !svg.contains("inf"));
    }

    #[test]
    fn one_sample_is_a_dot() {
        let svg = line(vec![(2.0, 5.0)]).to_svg();
        assert!(svg.contains("<circle"));
        assert!(!svg.contains("<polyline"));
        assert!(!svg.contains("NaN"));
    }

    #[test]
    fn all_zero_series_lies_on_the_x_axis() {
        let svg = line(vec![(0.0, 0.0), (1.0, 0.0), (2.0, 0.0)]).to_svg();
        let y0 = HEIGHT - BOTTOM;
        assert!(
            svg.contains(&format!(r#"points="{LEFT:.1},{y0:.1} "#)),
            "{svg}"
        );
        assert!(!svg.contains("NaN"));
    }

    #[test]
    fn points_are_scaled_into_the_plot() {
        let svg = line(vec![(0.0, 0.0), (10.0, 100.0)]).to_svg();
        // x 10 of an axis to 10, y 100 of an axis to 100: the top right corner.
        assert!(svg.contains(&format!("{:.1},", WIDTH - RIGHT)), "{svg}");
        let huge = line(vec![(0.0, 1e300), (1.0, f64::MAX), (2.0, f64::INFINITY)]).to_svg();
        assert!(!huge.contains("NaN") && !huge.contains("inf"), "{huge}");
    }

    #[test]
    fn legend_wraps() {
        let (pos, rows) = legend_layout(&["aaaaaaaaaaaaaaaaaaaa"; 8], 560.0);
        assert!(rows > 1);
        assert_eq!(pos[0], (0.0, 0));
        assert_eq!(legend_layout(&[], 560.0).1, 0);
    }

    #[test]
    fn labels_are_escaped() {
        let mut c = line(vec![(0.0, 1.0), (1.0, 2.0)]);
        c.series[0].label = "<script>".into();
        c.title = "\"x\"".into();
        let svg = c.to_svg();
        assert!(!svg.contains("<script>"));
        assert!(svg.contains("&lt;script&gt;"));
        assert!(svg.contains("&quot;x&quot;"));
    }

    #[test]
    fn bars_are_drawn_per_category_and_series() {
        let c = BarChart {
            title: "levels".into(),
            y_label: "seats".into(),
            categories: vec!["floor".into(), "upper".into()],
            series: vec![
                BarSeries {
                    label: "cap".into(),
                    color: "#111".into(),
                    values: vec![1200.0, 4000.0],
                },
                BarSeries {
                    label: "paid".into(),
                    color: "#222".into(),
                    values: vec![1196.0],
                },
            ],
        };
        let svg = c.to_svg();
        // 2 legend swatches + 4 bars.
        assert_eq!(svg.matches("<rect").count(), 6);
        assert!(svg.contains("upper: paid 0"));
        let empty = BarChart::default().to_svg();
        assert!(empty.contains("no data"));
    }

    /// Where `v` seconds lands on a plot whose x axis runs 0..100.
    fn px(v: f64) -> f64 {
        LEFT + v / 100.0 * (WIDTH - LEFT - RIGHT)
    }

    /// The fault labels of `svg`, drawn over the lines: `(label, y, title)`.
    fn fault_labels(svg: &str) -> Vec<(&str, f64, &str)> {
        let Some(start) = svg.find(r#"<g class="fault-labels">"#) else {
            return vec![];
        };
        let group = &svg[start..start + svg[start..].find("</g>").unwrap()];
        group
            .match_indices("<text ")
            .map(|(i, _)| {
                let el = &group[i..i + group[i..].find("</text>").unwrap()];
                let label = &el[el.find("</title>").unwrap() + "</title>".len()..];
                (label, attr(el, "text", "y").unwrap(), text(el, "title"))
            })
            .collect()
    }

    /// Each `<g class="fault…">…</g>` of `svg`.
    fn fault_groups(svg: &str) -> Vec<&str> {
        svg.match_indices(r#"<g class="fault"#)
            .filter(|(i, _)| !svg[*i..].starts_with(r#"<g class="fault-labels""#))
            .map(|(i, _)| {
                let end = svg[i..].find("</g>").unwrap();
                &svg[i..i + end + 4]
            })
            .collect()
    }

    /// Attribute `name` of the first `<tag …>` in `s`, as a number.
    fn attr(s: &str, tag: &str, name: &str) -> Option<f64> {
        let start = s.find(&format!("<{tag} "))?;
        let el = &s[start..start + s[start..].find('>')?];
        let key = format!(" {name}=\"");
        let v = &el[el.find(&key)? + key.len()..];
        v[..v.find('"')?].parse().ok()
    }

    /// The text of the first `<tag …>…</tag>` in `s`.
    fn text<'a>(s: &'a str, tag: &str) -> &'a str {
        let start = s.find(&format!("<{tag}")).unwrap();
        let open = start + s[start..].find('>').unwrap() + 1;
        &s[open..open + s[open..].find(&format!("</{tag}>")).unwrap()]
    }

    fn fault(label: &str, x0: f64, x1: f64) -> FaultBand {
        FaultBand {
            label: label.into(),
            title: format!("{label} (kill) on instance-1"),
            x0,
            x1,
            failed: false,
        }
    }

    fn near(a: f64, b: f64) -> bool {
        // Coordinates are written with one decimal.
        (a - b).abs() <= 0.051
    }

    #[test]
    fn faults_are_bands_at_their_times_with_staggered_labels() {
        let mut c = line(vec![(0.0, 0.0), (100.0, 10.0)]);
        c.bands = vec![Band {
            label: "rush".into(),
            x0: 0.0,
            x1: 50.0,
        }];
        c.faults = vec![
            fault("kill-instance-1", 10.0, 40.0),
            fault("redis-pause", 20.0, 60.0),
            fault("restart", 25.0, 25.0),
            fault("tail", 90.0, 120.0),
            fault("after-the-axis", 150.0, 160.0),
            fault("nan", f64::NAN, 3.0),
        ];
        let svg = c.to_svg();
        crate::xml_check::check(&svg).unwrap();
        let g = fault_groups(&svg);
        assert_eq!(
            g.len(),
            4,
            "outside the axis or not finite: not drawn\n{svg}"
        );

        let (x, w) = (
            attr(g[0], "rect", "x").unwrap(),
            attr(g[0], "rect", "width").unwrap(),
        );
        assert!(near(x, px(10.0)) && near(x + w, px(40.0)), "{x} {w}");
        let (x, w) = (
            attr(g[1], "rect", "x").unwrap(),
            attr(g[1], "rect", "width").unwrap(),
        );
        assert!(near(x, px(20.0)) && near(x + w, px(60.0)), "{x} {w}");
        // Instantaneous: a marker line, no band.
        assert!(!g[2].contains("<rect"));
        assert!(near(attr(g[2], "line", "x1").unwrap(), px(25.0)));
        assert!(near(attr(g[2], "line", "x2").unwrap(), px(25.0)));
        // Clamped to the axis' end.
        let (x, w) = (
            attr(g[3], "rect", "x").unwrap(),
            attr(g[3], "rect", "width").unwrap(),
        );
        assert!(near(x, px(90.0)) && near(x + w, WIDTH - RIGHT), "{x} {w}");

        // Each has its title and label; the three overlapping labels are on
        // three rows, below the phase labels.
        let labels = fault_labels(&svg);
        assert_eq!(labels.len(), 4);
        for ((g, label), name) in
            g.iter()
                .zip(&labels)
                .zip(["kill-instance-1", "redis-pause", "restart", "tail"])
        {
            assert_eq!(text(g, "title"), format!("{name} (kill) on instance-1"));
            assert_eq!(label.0, name);
            assert_eq!(label.2, format!("{name} (kill) on instance-1"));
        }
        let rows: Vec<f64> = labels[..3].iter().map(|l| l.1).collect();
        assert!(
            rows[0] != rows[1] && rows[1] != rows[2] && rows[0] != rows[2],
            "{rows:?}"
        );
        let phase_y = attr(
            &svg[svg.find(r#"class="phase""#).unwrap() - 40..],
            "text",
            "y",
        )
        .unwrap();
        assert!(rows.iter().all(|&y| y > phase_y), "{rows:?} {phase_y}");

        // In front of the phases, behind the lines; a legend entry.
        let at = |needle: &str| svg.find(needle).unwrap();
        assert!(at(r#"class="band""#) < at(r#"<g class="fault"#));
        assert!(at("</g>") < at("<polyline"));
        // The labels over the lines, so that they stay readable.
        assert!(svg.rfind("<polyline").unwrap() < at(r#"<g class="fault-labels">"#));
        assert!(svg.contains(r#"class="legend">faults</text>"#));
        assert!(!line(vec![(0.0, 1.0)]).to_svg().contains(">faults<"));
    }

    #[test]
    fn a_failed_or_short_fault_stays_visible() {
        let mut c = line(vec![(0.0, 0.0), (100.0, 10.0)]);
        let mut f = fault("short", 30.0, 30.1);
        f.failed = true;
        c.faults = vec![f];
        let svg = c.to_svg();
        let g = fault_groups(&svg);
        assert!(g[0].starts_with(r#"<g class="fault failed">"#));
        // A sliver of a band, and a marker so that it is seen.
        assert!(g[0].contains("<rect") && g[0].contains("<line"));
    }

    #[test]
    fn fault_labels_take_the_first_free_row() {
        assert_eq!(
            label_lanes(&[(0.0, 10.0), (5.0, 15.0), (12.0, 20.0)]),
            vec![0, 1, 0]
        );
        // Input order does not matter, only where the labels start.
        assert_eq!(
            label_lanes(&[(12.0, 20.0), (0.0, 10.0), (5.0, 15.0)]),
            vec![0, 0, 1]
        );
        let crowded = label_lanes(&[(0.0, 100.0); 6]);
        assert_eq!(&crowded[..FAULT_LANES_MAX], &[0, 1, 2, 3]);
        assert!(crowded.iter().all(|&l| l < FAULT_LANES_MAX));
    }

    #[test]
    fn fault_text_is_escaped() {
        let mut c = line(vec![(0.0, 0.0), (100.0, 10.0)]);
        let mut f = fault("<b>&\"'", 10.0, 20.0);
        f.title = "</title><script>".into();
        c.faults = vec![f];
        let svg = c.to_svg();
        crate::xml_check::check(&svg).unwrap();
        assert!(!svg.contains("<script") && !svg.contains("<b>"));
        assert!(svg.contains("&lt;b&gt;&amp;&quot;&#39;"));
    }

    #[test]
    fn the_xml_check_tells_well_formed_from_not() {
        use crate::xml_check::check;
        assert_eq!(
            check(r#"<svg a="1"><g><title>x &amp; y</title></g><rect/></svg>"#),
            Ok(())
        );
        for bad in [
            "<svg><g></svg>",
            "<svg></g>",
            r#"<svg a="1" a="2"/>"#,
            "<svg a=1/>",
            r#"<svg a="<"/>"#,
            "<svg>&nbsp;</svg>",
            "<svg>a & b</svg>",
            "<svg/><svg/>",
            "<svg>",
            "text<svg/>",
        ] {
            assert!(check(bad).is_err(), "{bad}");
        }
        // Every chart kind, even empty, is well-formed.
        check(&line(vec![]).to_svg()).unwrap();
        check(&line(vec![(1.0, 2.0)]).to_svg()).unwrap();
        check(&BarChart::default().to_svg()).unwrap();
    }
}
