//! `tfshard stats --html FILE`: one self-contained page (no script, no URL but XML
//! namespaces, nothing fetched) with, per feature, its numbers and one inline `<svg>`
//! chart: a number's equal-width histogram (TFDV's STANDARD buckets), a bytes feature's
//! top values; a baseline's beside it when given.
//!
//! Each feature's bars have a colour of their own (`fill` of `hsl(...)` by the feature's
//! place), drawn with crisp edges, so a test can find every chart in a screenshot.

use std::fmt::Write;

use super::proto::{self, Stats};
use super::{feature_name, summarize_feature, FeatureSummary};

/// Height of one feature's section, in CSS pixels (a test sizes its window by it).
pub const SECTION_HEIGHT: u32 = 200;
/// Height of the page's header.
pub const HEADER_HEIGHT: u32 = 80;
const CHART_WIDTH: f64 = 360.0;
const CHART_HEIGHT: f64 = 140.0;

/// The colour of the `i`-th feature's bars (the baseline's are the same, lighter).
pub fn colour(i: usize) -> (u8, u8, u8) {
    // Hues 37 degrees apart, saturated and mid-light: distinct for the features a page
    // shows, never grey.
    hsl_to_rgb(((i * 37) % 360) as f64, 0.75, 0.45)
}

fn hsl_to_rgb(h: f64, s: f64, l: f64) -> (u8, u8, u8) {
    let c = (1.0 - (2.0 * l - 1.0).abs()) * s;
    let x = c * (1.0 - ((h / 60.0) % 2.0 - 1.0).abs());
    let m = l - c / 2.0;
    let (r, g, b) = match (h / 60.0) as u32 {
        0 => (c, x, 0.0),
        1 => (x, c, 0.0),
        2 => (0.0, c, x),
        3 => (0.0, x, c),
        4 => (x, 0.0, c),
        _ => (c, 0.0, x),
    };
    let to = |v: f64| ((v + m) * 255.0).round().clamp(0.0, 255.0) as u8;
    (to(r), to(g), to(b))
}

fn escape(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c if c.is_control() => out.push('\u{fffd}'),
            c => out.push(c),
        }
    }
    out
}

fn number(v: f64) -> String {
    if v.is_nan() {
        "NaN".into()
    } else if v.is_infinite() {
        if v > 0.0 { "inf" } else { "-inf" }.into()
    } else if v != 0.0 && (v.abs() >= 1e6 || v.abs() < 1e-3) {
        format!("{v:.3e}")
    } else {
        format!("{:.4}", v)
            .trim_end_matches('0')
            .trim_end_matches('.')
            .to_owned()
    }
}

/// The bars of one chart: (label, count).
fn bars(f: &proto::FeatureNameStatistics) -> Vec<(String, f64)> {
    match &f.stats {
        Some(Stats::NumStats(n)) => n
            .histograms
            .iter()
            .find(|h| h.r#type == proto::HistogramType::Standard as i32)
            .map(|h| {
                h.buckets
                    .iter()
                    .map(|b| (number(b.low_value), b.sample_count))
                    .collect()
            })
            .unwrap_or_default(),
        Some(Stats::StringStats(s)) => s
            .top_values
            .iter()
            .take(10)
            .map(|v| (v.value.clone(), v.frequency))
            .collect(),
        _ => Vec::new(),
    }
}

/// A histogram's extremes, for its axis (`None` for top values: a chart of bars
/// across).
fn axis(f: &proto::FeatureNameStatistics) -> Option<(String, String)> {
    match &f.stats {
        Some(Stats::StringStats(_)) => None,
        Some(Stats::NumStats(n)) => {
            let h = n
                .histograms
                .iter()
                .find(|h| h.r#type == proto::HistogramType::Standard as i32)?;
            let (first, last) = (h.buckets.first()?, h.buckets.last()?);
            Some((number(first.low_value), number(last.high_value)))
        }
        _ => Some(Default::default()),
    }
}

/// One chart: vertical bars for a histogram (its extremes on the axis), horizontal ones
/// (with labels) for top values.
fn chart(
    out: &mut String,
    title: &str,
    bars: &[(String, f64)],
    axis: Option<(String, String)>,
    fill: &str,
) {
    let horizontal = axis.is_none();
    let _ = write!(
        out,
        "<figure><figcaption>{}</figcaption><svg xmlns=\"http://www.w3.org/2000/svg\" \
         width=\"{CHART_WIDTH}\" height=\"{CHART_HEIGHT}\" viewBox=\"0 0 {CHART_WIDTH} {CHART_HEIGHT}\" \
         shape-rendering=\"crispEdges\" role=\"img\">",
        escape(title)
    );
    let most = bars.iter().map(|b| b.1).fold(0.0f64, f64::max);
    if bars.is_empty() || most <= 0.0 {
        let _ = write!(
            out,
            "<text x=\"10\" y=\"70\" class=\"none\">no values</text></svg></figure>"
        );
        return;
    }
    if horizontal {
        let row = CHART_HEIGHT / bars.len().max(1) as f64;
        for (i, (label, count)) in bars.iter().enumerate() {
            let w = ((count / most) * (CHART_WIDTH - 130.0)).max(2.0);
            let y = i as f64 * row;
            let _ = write!(
                out,
                "<rect class=\"bar\" x=\"130\" y=\"{:.1}\" width=\"{w:.1}\" height=\"{:.1}\" fill=\"{fill}\"><title>{}: {}</title></rect>\
                 <text x=\"126\" y=\"{:.1}\" text-anchor=\"end\">{}</text>",
                y + 1.0,
                (row - 2.0).max(1.0),
                escape(label),
                number(*count),
                y + row * 0.7,
                escape(&label.chars().take(18).collect::<String>()),
            );
        }
    } else {
        let col = CHART_WIDTH / bars.len().max(1) as f64;
        for (i, (label, count)) in bars.iter().enumerate() {
            let h =
                ((count / most) * (CHART_HEIGHT - 20.0)).max(if *count > 0.0 { 2.0 } else { 0.0 });
            let _ = write!(
                out,
                "<rect class=\"bar\" x=\"{:.1}\" y=\"{:.1}\" width=\"{:.1}\" height=\"{h:.1}\" fill=\"{fill}\"><title>from {}: {}</title></rect>",
                i as f64 * col + 1.0,
                CHART_HEIGHT - 16.0 - h,
                (col - 2.0).max(1.0),
                escape(label),
                number(*count),
            );
        }
        let (first, last) = axis.unwrap_or_default();
        let _ = write!(
            out,
            "<text x=\"2\" y=\"{}\">{}</text><text x=\"{}\" y=\"{}\" text-anchor=\"end\">{}</text>",
            CHART_HEIGHT - 3.0,
            escape(&first),
            CHART_WIDTH - 2.0,
            CHART_HEIGHT - 3.0,
            escape(&last),
        );
    }
    out.push_str("</svg></figure>");
}

fn facts(s: &FeatureSummary, records: u64) -> String {
    let present = if records == 0 {
        0.0
    } else {
        100.0 * s.present as f64 / records as f64
    };
    let mut t = format!(
        "{} &middot; present in {present:.1}% &middot; {} values a record",
        s.kind,
        number(s.values_per_record[1])
    );
    if let Some(n) = &s.numbers {
        let _ = write!(
            t,
            " &middot; min {} &middot; mean {} &middot; max {} &middot; deviation {} &middot; zeros {} &middot; NaN {}",
            number(n.min),
            number(n.mean),
            number(n.max),
            number(n.std_dev),
            n.zeros,
            n.nan
        );
    }
    if let Some(st) = &s.strings {
        let _ = write!(
            t,
            " &middot; {} unique &middot; mean length {}",
            st.unique,
            number(st.avg_length)
        );
    }
    t
}

/// The page of `stats` (and, beside each feature, `baseline`'s).
pub fn page(
    title: &str,
    stats: &proto::DatasetFeatureStatistics,
    baseline: Option<&proto::DatasetFeatureStatistics>,
) -> String {
    let mut out = String::new();
    let _ = write!(
        out,
        "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\"><title>{t}</title><style>\
         body{{font:13px system-ui,sans-serif;margin:0 16px;color:#222;background:#fff}}\
         header{{height:{HEADER_HEIGHT}px;box-sizing:border-box;padding-top:12px}}\
         h1{{font-size:18px;margin:0 0 6px}}\
         section{{height:{SECTION_HEIGHT}px;box-sizing:border-box;border-top:1px solid #ddd;overflow:hidden}}\
         h2{{font-size:14px;margin:6px 0 2px}} p{{margin:0 0 4px;color:#555}}\
         figure{{display:inline-block;margin:0 24px 0 0;vertical-align:top}}\
         figcaption{{font-size:11px;color:#777}} svg text{{font-size:10px;fill:#444}}\
         </style></head><body><header><h1>{t}</h1><p>{} records, {} features{}. Histograms: ten equal-width buckets between the finite extremes; bytes: the most frequent values.</p></header>\n",
        stats.num_examples,
        stats.features.len(),
        baseline.map_or(String::new(), |b| format!("; the baseline (lighter): {} records", b.num_examples)),
        t = escape(title),
    );
    let theirs: std::collections::HashMap<String, &proto::FeatureNameStatistics> = baseline
        .map(|b| b.features.iter().map(|f| (feature_name(f), f)).collect())
        .unwrap_or_default();
    for (i, f) in stats.features.iter().enumerate() {
        let s = summarize_feature(f);
        let (r, g, b) = colour(i);
        let fill = format!("rgb({r},{g},{b})");
        let _ = write!(
            out,
            "<section class=\"feature\" data-feature=\"{}\"><h2>{}</h2><p>{}</p>",
            escape(&s.name),
            escape(&s.name),
            facts(&s, stats.num_examples)
        );
        chart(&mut out, "this set", &bars(f), axis(f), &fill);
        if let Some(base) = theirs.get(&s.name) {
            let light = format!(
                "rgb({},{},{})",
                (u16::from(r) + 255) / 2,
                (u16::from(g) + 255) / 2,
                (u16::from(b) + 255) / 2
            );
            chart(&mut out, "baseline", &bars(base), axis(base), &light);
        } else if baseline.is_some() {
            out.push_str(
                "<figure><figcaption>baseline</figcaption><p>not in the baseline</p></figure>",
            );
        }
        out.push_str("</section>\n");
    }
    out.push_str("</body></html>\n");
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every feature gets a section with an inline chart; names are escaped; nothing
    /// refers to the network.
    #[test]
    fn a_page_has_a_chart_per_feature_and_no_url() {
        let mut p = crate::stats::Partial::new();
        for r in crate::stats::test_records(300) {
            p.add_payload(&r, crate::example::RecordType::Example)
                .unwrap();
        }
        let stats = p.to_proto();
        let html = page("<set> & co", &stats, Some(&stats));
        assert_eq!(html.matches("<section").count(), stats.features.len());
        assert_eq!(html.matches("<svg").count(), 2 * stats.features.len());
        assert!(html.contains("&lt;set&gt; &amp; co"));
        let without_namespaces = html.replace("http://www.w3.org/2000/svg", "");
        assert!(!without_namespaces.contains("http"), "a URL in the page");
        assert!(!html.contains("<script"));
        assert_ne!(colour(0), colour(1));
    }
}
