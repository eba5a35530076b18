//! A hand-written SVG bar chart of req/s per variant (no plotting dependency).

use std::fmt::Write as _;

use super::table::{Row, format_rate};
use super::variant::Variant;

/// The chart's geometry, in SVG user units.
struct Layout {
    width: f64,
    label_width: f64,
    value_width: f64,
    row_height: f64,
    bar_height: f64,
    top: f64,
    bottom: f64,
}

const L: Layout = Layout {
    width: 760.0,
    label_width: 170.0,
    value_width: 130.0,
    row_height: 26.0,
    bar_height: 16.0,
    top: 44.0,
    bottom: 34.0,
};

/// Who a variant belongs to, for its bar colour.
fn colour(variant: Variant) -> &'static str {
    match variant {
        Variant::Bare => "#8c8c8c",
        Variant::Governor
        | Variant::IncrExpire
        | Variant::TowerSessionsRead
        | Variant::TowerSessionsModify => "#e08a2c",
        _ => "#2c6fb7",
    }
}

fn escape(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
}

/// One horizontal bar per row: the median req/s, a whisker from the lowest to the highest round,
/// the value and the ratio to `bare` at the end. `subtitle` says how the run was made.
#[must_use]
pub fn svg(rows: &[Row], subtitle: &str) -> String {
    let Layout {
        width,
        label_width,
        value_width,
        row_height,
        bar_height,
        top: chart_top,
        bottom,
    } = L;
    let count = rows.len().max(1) as f64;
    let height = chart_top + row_height * count + bottom;
    let plot = width - label_width - value_width;
    let max = rows
        .iter()
        .map(|r| r.requests_per_sec_range.1.max(r.requests_per_sec))
        .fold(1.0, f64::max);
    let x = |rate: f64| label_width + plot * (rate / max).clamp(0.0, 1.0);

    let mut out = String::new();
    let _ = writeln!(
        out,
        r#"<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" viewBox="0 0 {width} {height}" font-family="sans-serif" font-size="12">"#
    );
    let _ = writeln!(
        out,
        r##"<rect width="{width}" height="{height}" fill="#ffffff"/>"##
    );
    let _ = writeln!(
        out,
        r#"<text x="10" y="18" font-size="14" font-weight="bold">Requests per second, median of rounds (longer is better)</text>"#
    );
    let _ = writeln!(
        out,
        r##"<text x="10" y="34" fill="#555555">{}</text>"##,
        escape(subtitle)
    );
    for (i, r) in rows.iter().enumerate() {
        let top = chart_top + row_height * i as f64;
        let mid = top + row_height / 2.0;
        let end = x(r.requests_per_sec);
        let _ = writeln!(
            out,
            r#"<text x="{:.1}" y="{:.1}" text-anchor="end" dominant-baseline="middle">{}</text>"#,
            label_width - 8.0,
            mid,
            escape(r.variant.name())
        );
        let _ = writeln!(
            out,
            r#"<rect x="{label_width}" y="{:.1}" width="{:.1}" height="{bar_height}" fill="{}"/>"#,
            mid - bar_height / 2.0,
            end - label_width,
            colour(r.variant)
        );
        let (lo, hi) = r.requests_per_sec_range;
        let _ = writeln!(
            out,
            r##"<line x1="{:.1}" x2="{:.1}" y1="{mid:.1}" y2="{mid:.1}" stroke="#222222" stroke-width="1.5"/>"##,
            x(lo),
            x(hi)
        );
        let ratio = r
            .ratio
            .map(|x| format!(" ({x:.2}× bare)"))
            .unwrap_or_default();
        let _ = writeln!(
            out,
            r#"<text x="{:.1}" y="{mid:.1}" dominant-baseline="middle">{}{}</text>"#,
            x(hi).max(end) + 6.0,
            format_rate(r.requests_per_sec),
            ratio
        );
    }
    let legend_y = height - 12.0;
    let _ = writeln!(
        out,
        r##"<rect x="10" y="{:.1}" width="10" height="10" fill="#2c6fb7"/><text x="24" y="{legend_y:.1}">redis-guard</text><rect x="110" y="{:.1}" width="10" height="10" fill="#e08a2c"/><text x="124" y="{legend_y:.1}">peers</text><rect x="180" y="{:.1}" width="10" height="10" fill="#8c8c8c"/><text x="194" y="{legend_y:.1}">bare route</text><text x="290" y="{legend_y:.1}" fill="#555555">whisker: lowest to highest round</text>"##,
        legend_y - 9.0,
        legend_y - 9.0,
        legend_y - 9.0
    );
    out.push_str("</svg>\n");
    out
}
