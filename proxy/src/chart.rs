//! The SVG charts `sluice replay --out DIR` writes: one per session (content tokens and billed
//! input per turn, baseline against sluice) and one for the whole corpus (each session's
//! content saved and billed cost change), each with its axes, ticks, units and the figure saved.
//!
//! Plain SVG text, no dependency and no script: the files open in a browser or a Markdown
//! viewer as they are, and a test reads them as text.

use std::fmt::Write as _;

use modes::replay::{Prices, SessionReport, Totals, totals};

const WIDTH: f64 = 760.0;
const PANEL: f64 = 220.0;
/// Room for the y tick labels on the left, and the legend on the right.
const LEFT: f64 = 64.0;
const RIGHT: f64 = 20.0;
const BASELINE: &str = "#8c959f";
const SLUICE: &str = "#1f6feb";

/// A session's chart: its name and figures on top, then two panels over its turns.
pub fn session(report: &SessionReport, name: &str, prices: &Prices) -> String {
    let t = totals(std::slice::from_ref(report), prices);
    let (tokens, cost): (Vec<_>, Vec<_>) = report
        .turns
        .iter()
        .map(|turn| {
            (
                (
                    turn.baseline.content_tokens as f64,
                    turn.sluice.content_tokens as f64,
                ),
                (turn.baseline.cost(prices), turn.sluice.cost(prices)),
            )
        })
        .unzip();
    let height = 48.0 + 2.0 * (PANEL + 24.0);
    let mut out = open(height);
    let _ = write!(
        out,
        r#"<text x="{LEFT}" y="20" font-size="15" font-weight="bold">{}</text><text x="{LEFT}" y="38">{} turns · content saved {}% · billed input {}% · cache writes {}% · flips {}</text>"#,
        escape(name),
        t.turns,
        unsigned(t.content_saved_pct),
        signed(t.cost_change_pct),
        signed(t.cache_write_change_pct),
        t.flips
    );
    let panels = [
        ("content tokens per turn", "tokens", tokens),
        ("billed input per turn", "fresh-token equivalents", cost),
    ];
    for (i, (title, unit, pairs)) in panels.into_iter().enumerate() {
        let (base, ours): (Vec<f64>, Vec<f64>) = pairs.into_iter().unzip();
        let top = 48.0 + i as f64 * (PANEL + 24.0);
        line_panel(&mut out, top, title, unit, &base, &ours);
    }
    out.push_str("</svg>\n");
    out
}

/// The corpus chart: one row per session, content saved and billed cost change side by side,
/// and the corpus total on top.
pub fn corpus(reports: &[(String, &SessionReport)], all: &Totals, prices: &Prices) -> String {
    let row = 18.0;
    let top = 64.0;
    let height = top + row * reports.len() as f64 + 40.0;
    let mut out = open(height);
    let _ = write!(
        out,
        r#"<text x="12" y="20" font-size="15" font-weight="bold">sluice replay: {} sessions, {} turns</text><text x="12" y="38">content saved {}% · billed input {}% against no compaction · cache writes {}% · flips {}</text>"#,
        all.sessions,
        all.turns,
        unsigned(all.content_saved_pct),
        signed(all.cost_change_pct),
        signed(all.cache_write_change_pct),
        all.flips
    );
    // Two bar columns on a shared scale of percent, each from its own zero.
    let (label_w, gap) = (250.0, 60.0);
    let col_w = (WIDTH - label_w - gap - 20.0) / 2.0;
    let rows: Vec<(f64, f64)> = reports
        .iter()
        .map(|(_, r)| {
            let t = totals(std::slice::from_ref(*r), prices);
            (t.content_saved_pct, t.cost_change_pct)
        })
        .collect();
    let span = rows
        .iter()
        .flat_map(|(a, b)| [a.abs(), b.abs()])
        .fold(10.0_f64, f64::max);
    let (span, _) = nice_ticks(span, 4);
    for (c, title) in ["content saved (%)", "billed input change (%)"]
        .iter()
        .enumerate()
    {
        let x0 = label_w + c as f64 * (col_w + gap);
        let zero = x0 + col_w / 2.0;
        let _ = write!(
            out,
            r##"<text x="{x0:.0}" y="{:.0}" font-weight="bold">{title}</text><line x1="{zero:.1}" y1="{:.0}" x2="{zero:.1}" y2="{:.0}" stroke="#444"/><text x="{:.1}" y="{:.0}" fill="#57606a" text-anchor="middle">−{span:.0}</text><text x="{zero:.1}" y="{:.0}" fill="#57606a" text-anchor="middle">0</text><text x="{:.1}" y="{:.0}" fill="#57606a" text-anchor="middle">+{span:.0}</text>"##,
            top - 8.0,
            top - 4.0,
            top + row * rows.len() as f64,
            zero - col_w * 0.4,
            top + row * rows.len() as f64 + 14.0,
            top + row * rows.len() as f64 + 14.0,
            zero + col_w * 0.4,
            top + row * rows.len() as f64 + 14.0,
        );
    }
    for (i, ((name, _), (saved, change))) in reports.iter().zip(&rows).enumerate() {
        let y = top + i as f64 * row;
        let _ = write!(
            out,
            r#"<text x="{:.0}" y="{:.0}" text-anchor="end"><title>{}</title>{}</text>"#,
            label_w - 8.0,
            y + 13.0,
            escape(name),
            escape(&tail(name, 34))
        );
        for (c, value) in [*saved, *change].into_iter().enumerate() {
            let zero = label_w + c as f64 * (col_w + gap) + col_w / 2.0;
            // The scale leaves a fifth of each half for the figure printed beside a bar.
            let len = value / span * col_w * 0.4;
            let (x, w) = if len < 0.0 {
                (zero + len, -len)
            } else {
                (zero, len)
            };
            let color = if (c == 0) == (value >= 0.0) {
                SLUICE
            } else {
                "#cf222e"
            };
            // The figure beside its bar, on the side away from zero.
            let (text_x, anchor) = if len < 0.0 {
                (x - 4.0, "end")
            } else {
                (x + w + 4.0, "start")
            };
            let _ = write!(
                out,
                r##"<rect x="{x:.1}" y="{:.1}" width="{w:.1}" height="{:.1}" fill="{color}"/><text x="{text_x:.1}" y="{:.1}" text-anchor="{anchor}" fill="#57606a" font-size="11">{}</text>"##,
                y + 3.0,
                row - 6.0,
                y + 13.0,
                signed(value)
            );
        }
    }
    out.push_str("</svg>\n");
    out
}

fn open(height: f64) -> String {
    format!(
        r#"<svg xmlns="http://www.w3.org/2000/svg" width="{WIDTH}" height="{height:.0}" viewBox="0 0 {WIDTH} {height:.0}" font-family="sans-serif" font-size="12"><rect width="100%" height="100%" fill="white"/>"#
    )
}

/// One panel: title, y axis with ticks and unit, x axis with turn numbers, two series.
fn line_panel(out: &mut String, top: f64, title: &str, unit: &str, base: &[f64], ours: &[f64]) {
    let (plot_top, plot_bottom) = (top + 24.0, top + PANEL - 28.0);
    let (x0, x1) = (LEFT, WIDTH - RIGHT);
    let max = base.iter().chain(ours).copied().fold(0.0_f64, f64::max);
    let (y_max, y_ticks) = nice_ticks(max.max(1.0), 4);
    let turns = base.len().max(1);
    let x_of = |i: usize| x0 + (x1 - x0) * i as f64 / (turns.max(2) - 1) as f64;
    let y_of = |v: f64| plot_bottom - (plot_bottom - plot_top) * v / y_max;
    let _ = write!(
        out,
        r##"<text x="{x0}" y="{:.0}" font-weight="bold">{title}</text><text x="{x1}" y="{:.0}" text-anchor="end"><tspan fill="{BASELINE}">━ baseline</tspan>  <tspan fill="{SLUICE}">━ sluice</tspan></text>"##,
        top + 14.0,
        top + 14.0
    );
    for tick in &y_ticks {
        let y = y_of(*tick);
        let _ = write!(
            out,
            r##"<line x1="{x0}" y1="{y:.1}" x2="{x1}" y2="{y:.1}" stroke="#d0d7de" stroke-width="0.5"/><text x="{:.0}" y="{:.1}" text-anchor="end" fill="#57606a">{}</text>"##,
            x0 - 6.0,
            y + 4.0,
            compact(*tick)
        );
    }
    let _ = write!(
        out,
        r##"<text transform="translate(12 {:.0}) rotate(-90)" text-anchor="middle" fill="#57606a" font-size="11">{unit}</text><line x1="{x0}" y1="{plot_bottom:.1}" x2="{x1}" y2="{plot_bottom:.1}" stroke="#444"/><line x1="{x0}" y1="{plot_top:.1}" x2="{x0}" y2="{plot_bottom:.1}" stroke="#444"/>"##,
        (plot_top + plot_bottom) / 2.0
    );
    // Turn 1, then round turn numbers.
    let (_, mut x_ticks) = nice_ticks(turns as f64, 8);
    x_ticks.retain(|t| *t > 1.0 && *t <= turns as f64 && t.fract() == 0.0);
    x_ticks.insert(0, 1.0);
    for tick in &x_ticks {
        let x = x_of(*tick as usize - 1);
        let _ = write!(
            out,
            r##"<line x1="{x:.1}" y1="{plot_bottom:.1}" x2="{x:.1}" y2="{:.1}" stroke="#444"/><text x="{x:.1}" y="{:.1}" text-anchor="middle" fill="#57606a">{tick:.0}</text>"##,
            plot_bottom + 4.0,
            plot_bottom + 16.0
        );
    }
    let _ = write!(
        out,
        r##"<text x="{:.0}" y="{:.1}" text-anchor="middle" fill="#57606a" font-size="11">turn</text>"##,
        (x0 + x1) / 2.0,
        plot_bottom + 27.0
    );
    for (values, color) in [(base, BASELINE), (ours, SLUICE)] {
        let points: Vec<String> = values
            .iter()
            .enumerate()
            .map(|(i, v)| format!("{:.1},{:.1}", x_of(i), y_of(*v)))
            .collect();
        let _ = write!(
            out,
            r#"<polyline fill="none" stroke="{color}" stroke-width="2" points="{}"/>"#,
            points.join(" ")
        );
    }
}

/// A round top at or above `max` and the ticks from 0 to it, about `target` of them, on steps
/// of 1, 2 or 5 times a power of ten.
pub fn nice_ticks(max: f64, target: usize) -> (f64, Vec<f64>) {
    let raw = max / target.max(1) as f64;
    if !(raw.is_finite() && raw > 0.0) {
        return (1.0, vec![0.0, 1.0]);
    }
    let magnitude = 10f64.powf(raw.log10().floor());
    // The step whose count of intervals comes nearest the target (the larger step on a tie).
    let intervals = |step: f64| (max / step).ceil();
    let target = target.max(1) as f64;
    let step = [10.0, 5.0, 2.0, 1.0]
        .iter()
        .map(|m| m * magnitude)
        .min_by(|a, b| {
            let off = |s: f64| (intervals(s) - target).abs();
            off(*a).total_cmp(&off(*b))
        })
        .unwrap_or(magnitude);
    let top = (max / step).ceil() * step;
    let ticks = (0..=((top / step).round() as usize))
        .map(|i| i as f64 * step)
        .collect();
    (top, ticks)
}

/// A tick label: 950, 12k, 1.5M.
fn compact(v: f64) -> String {
    match v.abs() {
        a if a >= 1e6 => format!("{}M", trim(v / 1e6)),
        a if a >= 1e3 => format!("{}k", trim(v / 1e3)),
        _ => trim(v),
    }
}

fn trim(v: f64) -> String {
    let s = format!("{v:.1}");
    s.strip_suffix(".0").map_or(s.clone(), str::to_owned)
}

/// A percentage to one decimal with its sign; a rounding of zero is `0.0`, never `-0.0`.
fn signed(v: f64) -> String {
    if v.abs() < 0.05 {
        "0.0".to_owned()
    } else {
        format!("{v:+.1}")
    }
}

/// A percentage to one decimal, `0.0` for a rounding of zero.
fn unsigned(v: f64) -> String {
    if v.abs() < 0.05 {
        "0.0".to_owned()
    } else {
        format!("{v:.1}")
    }
}

/// The last `n` characters of a long name behind an ellipsis: run names differ at the end.
fn tail(name: &str, n: usize) -> String {
    let count = name.chars().count();
    if count <= n {
        return name.to_owned();
    }
    let kept: String = name.chars().skip(count - n + 1).collect();
    format!("…{kept}")
}

/// Text as SVG content: a session name may hold `&` or `<`.
fn escape(text: &str) -> String {
    text.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ticks_are_round_and_cover_the_maximum() {
        assert_eq!(
            nice_ticks(87.0, 4),
            (100.0, vec![0.0, 20.0, 40.0, 60.0, 80.0, 100.0])
        );
        assert_eq!(nice_ticks(4.0, 4).1, vec![0.0, 1.0, 2.0, 3.0, 4.0]);
        assert_eq!(nice_ticks(92.0, 8).1.len(), 11, "steps of 10 for 92 turns");
        assert_eq!(nice_ticks(0.0, 4), (1.0, vec![0.0, 1.0]));
        let (top, ticks) = nice_ticks(123_456.0, 4);
        assert!(top >= 123_456.0 && ticks.len() <= 6, "{top} {ticks:?}");
        assert_eq!(compact(50_000.0), "50k");
        assert_eq!(compact(1_500_000.0), "1.5M");
        assert_eq!(compact(2.5), "2.5");
        assert_eq!(escape("a<b&c"), "a&lt;b&amp;c");
        assert_eq!(signed(-0.01), "0.0");
        assert_eq!(signed(-16.94), "-16.9");
        assert_eq!(tail("abcdef", 4), "…def");
    }
}
