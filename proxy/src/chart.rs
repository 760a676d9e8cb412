//! The SVG charts `sluice replay --out DIR` writes: one per session (content tokens and billed
//! input per turn, baseline against sluice) and one for the whole corpus (each session's billed
//! input saved, net, and content tokens saved, net), each with its axes, ticks, units and the
//! figure saved. Both lead with the report's headline, billed input saved, net, and every
//! savings figure reads positive for a saving and negative for a loss, as in the report.
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
        r#"<text x="{LEFT}" y="20" font-size="15" font-weight="bold">{}</text><text x="{LEFT}" y="38" font-size="11">{} turns · billed saved, net {} · before rounds {} · content tokens, net {} · cache writes {}% · flips {}</text>"#,
        escape(name),
        t.turns,
        saved_pct(t.billed_savings_pct),
        saved_pct(t.billed_savings_pct_gross),
        saved_pct(t.net_savings_pct),
        signed(t.cache_write_change_pct),
        t.flips
    );
    let panels = [
        ("content tokens per turn", "tokens", tokens),
        ("billed input per turn", "input-token equivalents", cost),
    ];
    for (i, (title, unit, pairs)) in panels.into_iter().enumerate() {
        let (base, ours): (Vec<f64>, Vec<f64>) = pairs.into_iter().unzip();
        let top = 48.0 + i as f64 * (PANEL + 24.0);
        line_panel(&mut out, top, title, unit, &base, &ours);
    }
    out.push_str("</svg>\n");
    out
}

/// The corpus chart: one row per session, billed input saved (the report's headline and its
/// per-session figure) and content tokens saved (what `/stats` reads live) side by side, both
/// net of expand rounds, and the corpus total on top.
pub fn corpus(reports: &[(String, &SessionReport)], all: &Totals, prices: &Prices) -> String {
    let row = 18.0;
    let top = 100.0;
    let height = top + row * reports.len() as f64 + 40.0;
    let mut out = open(height);
    // Three lines, each short enough for the chart's width: the headline, what was replayed,
    // the rest of the figures.
    let _ = write!(
        out,
        r#"<text x="12" y="20" font-size="15" font-weight="bold">sluice replay: billed input saved, net {}</text><text x="12" y="40" font-size="11">{}</text><text x="12" y="58" font-size="11">before expand rounds {} · content tokens saved, net {} · sessions that cost more {} of {} · cache writes {}% · flips {}</text>"#,
        saved_pct(all.billed_savings_pct),
        escape(&what_was_replayed(all)),
        saved_pct(all.billed_savings_pct_gross),
        saved_pct(all.net_savings_pct),
        all.losing_sessions,
        all.sessions,
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
            (t.billed_savings_pct, t.net_savings_pct)
        })
        .collect();
    let span = rows
        .iter()
        .flat_map(|(a, b)| [a.abs(), b.abs()])
        .fold(10.0_f64, f64::max);
    let (span, _) = nice_ticks(span, 4);
    for (c, title) in [
        "billed input saved, net (%)",
        "content tokens saved, net (%)",
    ]
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
    for (i, ((name, _), (billed, net))) in reports.iter().zip(&rows).enumerate() {
        let y = top + i as f64 * row;
        let _ = write!(
            out,
            r#"<text x="{:.0}" y="{:.0}" text-anchor="end"><title>{}</title>{}</text>"#,
            label_w - 8.0,
            y + 13.0,
            escape(name),
            escape(&tail(name, 34))
        );
        for (c, value) in [*billed, *net].into_iter().enumerate() {
            let zero = label_w + c as f64 * (col_w + gap) + col_w / 2.0;
            // The scale leaves a fifth of each half for the figure printed beside a bar.
            let len = value / span * col_w * 0.4;
            let (x, w) = if len < 0.0 {
                (zero + len, -len)
            } else {
                (zero, len)
            };
            // Both columns are savings: a loss is red.
            let color = if value >= 0.0 { SLUICE } else { "#cf222e" };
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

/// A savings figure as the report writes it, the same convention as `/stats`: a saving reads
/// positive, a loss negative, and a rounding of zero is `0.00%`, never `-0.00%`.
pub(crate) fn saved_pct(v: f64) -> String {
    if v.abs() < 0.005 {
        "0.00%".to_owned()
    } else {
        format!("{v:.2}%")
    }
}

/// What was replayed: recordings, the dialects they were replayed in, sessions and turns.
pub(crate) fn what_was_replayed(t: &Totals) -> String {
    let dialects: Vec<String> = t
        .dialects
        .iter()
        .map(|(dialect, n)| format!("{dialect} {n}"))
        .collect();
    let plural =
        |n: usize, one: &str, many: &str| format!("{n} {}", if n == 1 { one } else { many });
    format!(
        "{} in {} ({}): {}, {}",
        plural(t.recordings, "recording", "recordings"),
        plural(t.dialects.len(), "dialect", "dialects"),
        dialects.join(", "),
        plural(t.sessions, "session", "sessions"),
        plural(t.turns, "turn", "turns"),
    )
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
    for (tick, label) in y_ticks.iter().zip(tick_labels(&y_ticks)) {
        let y = y_of(*tick);
        let _ = write!(
            out,
            r##"<line x1="{x0}" y1="{y:.1}" x2="{x1}" y2="{y:.1}" stroke="#d0d7de" stroke-width="0.5"/><text x="{:.0}" y="{:.1}" text-anchor="end" fill="#57606a">{label}</text>"##,
            x0 - 6.0,
            y + 4.0,
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
/// of 1, 2 or 5 times a power of ten. A zero, negative or non-finite `max` (nothing to plot)
/// gets the axis 0 to 1; a tiny one gets ticks on its own scale, labelled by [`tick_labels`].
pub fn nice_ticks(max: f64, target: usize) -> (f64, Vec<f64>) {
    let raw = max / target.max(1) as f64;
    let magnitude = 10f64.powf(raw.log10().floor());
    // Nothing to plot (or a scale below what a float holds): the axis 0 to 1.
    if !(raw.is_finite() && raw > 0.0 && magnitude.is_normal()) {
        return (1.0, vec![0.0, 1.0]);
    }
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
    let intervals = (max / step).ceil().max(1.0);
    let top = intervals * step;
    let ticks = (0..=(intervals as usize))
        .map(|i| i as f64 * step)
        .collect();
    (top, ticks)
}

/// The labels of ticks from [`nice_ticks`]: [`compact_to`] (950, 12k, 1.5M) with as many decimals
/// as it takes to write every tick as it is, so an axis never reads "1, 1, 1, 0, 0" (nor 0.2
/// for 0.25).
pub fn tick_labels(ticks: &[f64]) -> Vec<String> {
    let exact = |labels: &[String]| {
        ticks
            .iter()
            .zip(labels)
            .all(|(tick, label)| (read_compact(label) - tick).abs() <= 1e-9 * tick.abs())
    };
    for decimals in 1..=12 {
        let labels: Vec<String> = ticks.iter().map(|t| compact_to(*t, decimals)).collect();
        if exact(&labels) {
            return labels;
        }
    }
    // Steps below a trillionth: the exponent tells them apart.
    ticks.iter().map(|t| format!("{t:.1e}")).collect()
}

/// A tick label with up to `decimals` decimals: 950, 12k, 1.5M.
fn compact_to(v: f64, decimals: usize) -> String {
    match v.abs() {
        a if a >= 1e6 => format!("{}M", trim(v / 1e6, decimals)),
        a if a >= 1e3 => format!("{}k", trim(v / 1e3, decimals)),
        _ => trim(v, decimals),
    }
}

/// The value a [`compact_to`] label writes (NaN for anything else).
fn read_compact(label: &str) -> f64 {
    let (digits, scale) = match label.as_bytes().last() {
        Some(b'M') => (&label[..label.len() - 1], 1e6),
        Some(b'k') => (&label[..label.len() - 1], 1e3),
        _ => (label, 1.0),
    };
    digits.parse::<f64>().map_or(f64::NAN, |v| v * scale)
}

/// `v` to `decimals` decimals without trailing zeros; a rounding of zero is `0`, never `-0`.
fn trim(v: f64, decimals: usize) -> String {
    let s = format!("{v:.decimals$}");
    let s = if s.contains('.') {
        s.trim_end_matches('0').trim_end_matches('.').to_owned()
    } else {
        s
    };
    if s == "-0" { "0".to_owned() } else { s }
}

/// A percentage to one decimal with its sign; a rounding of zero is `0.0`, never `-0.0`.
fn signed(v: f64) -> String {
    if v.abs() < 0.05 {
        "0.0".to_owned()
    } else {
        format!("{v:+.1}")
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
        assert_eq!(compact_to(50_000.0, 1), "50k");
        assert_eq!(compact_to(1_500_000.0, 1), "1.5M");
        assert_eq!(compact_to(2.5, 1), "2.5");
        assert_eq!(escape("a<b&c"), "a&lt;b&amp;c");
        assert_eq!(signed(-0.01), "0.0");
        assert_eq!(signed(-16.94), "-16.9");
        assert_eq!(tail("abcdef", 4), "…def");
    }

    /// An axis over nothing, or over a range too small for one decimal, still has distinct,
    /// ordered ticks from 0, and labels that tell them apart.
    #[test]
    fn a_zero_or_tiny_range_has_distinct_ticks() {
        for max in [
            0.0,
            -3.0,
            f64::NAN,
            f64::INFINITY,
            1e-300,
            1e-9,
            0.003,
            0.3,
            1.0,
            1.2,
        ] {
            let (top, ticks) = nice_ticks(max, 4);
            assert!(ticks.len() >= 2, "{max}: {ticks:?}");
            assert_eq!(ticks[0], 0.0, "{max}");
            assert!(ticks.windows(2).all(|p| p[0] < p[1]), "{max}: {ticks:?}");
            assert!(top >= ticks[ticks.len() - 1] && top > 0.0, "{max}: {top}");
            if max.is_finite() && max > 0.0 {
                assert!(top >= max, "{max}: {top}");
            }
            let labels = tick_labels(&ticks);
            let mut unique = labels.clone();
            unique.dedup();
            assert_eq!(unique, labels, "{max}: {labels:?}");
        }
        assert_eq!(
            tick_labels(&nice_ticks(0.003, 4).1),
            ["0", "0.001", "0.002", "0.003"]
        );
        assert_eq!(
            tick_labels(&[0.0, 0.25, 0.5, 0.75, 1.0]),
            ["0", "0.25", "0.5", "0.75", "1"]
        );
        assert_eq!(tick_labels(&[0.0, 1.0]), ["0", "1"]);
        assert_eq!(trim(-0.01, 1), "0");
        assert_eq!(compact_to(1_500.0, 1), "1.5k");
    }
}
