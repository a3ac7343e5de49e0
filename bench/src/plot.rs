//! The PNG of the latency distributions: per handler, the cumulative distribution of per-event
//! latency (log scale), and a histogram of the same on a linear scale up to the 99.5th
//! percentile. Text is drawn with DejaVu Sans embedded in the binary (plotters' `ab_glyph`
//! backend), so no system fonts or fontconfig are needed.

use std::path::Path;

use plotters::prelude::*;
use plotters::style::FontStyle;

use crate::stats::quantile;

const COLORS: [RGBColor; 3] = [
    RGBColor(200, 60, 40),
    RGBColor(30, 110, 200),
    RGBColor(60, 150, 60),
];

/// Registers the embedded font as `sans-serif` (idempotent).
pub fn register_font() -> Result<(), String> {
    plotters::style::register_font("sans-serif", FontStyle::Normal, dejavu::sans::regular())
        .map_err(|_| "the embedded DejaVu Sans font is not readable".to_string())
}

/// Draws `series` (label, latencies in µs) to `path` as a PNG, `title` on top.
///
/// # Errors
/// When the PNG cannot be drawn or written.
pub fn latency_png(path: &Path, title: &str, series: &[(String, Vec<u64>)]) -> Result<(), String> {
    register_font()?;
    let e = |e: &dyn std::fmt::Display| e.to_string();
    let root = BitMapBackend::new(path, (1400, 620)).into_drawing_area();
    root.fill(&WHITE).map_err(|x| e(&x))?;
    let root = root.titled(title, ("sans-serif", 22)).map_err(|x| e(&x))?;
    let (left, right) = root.split_horizontally(720);

    let all: Vec<u64> = series.iter().flat_map(|(_, v)| v.iter().copied()).collect();
    let lo = (quantile(&all, 0.0).max(1) as f64 / 1000.0 * 0.8).max(0.05);
    let hi = quantile(&all, 1.0) as f64 / 1000.0 * 1.25;

    // Left: CDFs on a log axis.
    let mut cdf = ChartBuilder::on(&left)
        .caption(
            "cumulative share of events (log latency)",
            ("sans-serif", 18),
        )
        .margin(14)
        .x_label_area_size(44)
        .y_label_area_size(56)
        .build_cartesian_2d((lo..hi).log_scale(), 0.0f64..1.0)
        .map_err(|x| e(&x))?;
    cdf.configure_mesh()
        .x_desc("latency per event (ms)")
        .y_desc("share of events at or below")
        .label_style(("sans-serif", 14))
        .draw()
        .map_err(|x| e(&x))?;
    for (i, (label, values)) in series.iter().enumerate() {
        let mut sorted = values.clone();
        sorted.sort_unstable();
        let n = sorted.len().max(1) as f64;
        let step = (sorted.len() / 2000).max(1);
        let points: Vec<(f64, f64)> = sorted
            .iter()
            .enumerate()
            .filter(|(k, _)| k % step == 0 || *k + 1 == sorted.len())
            .map(|(k, v)| (*v as f64 / 1000.0, (k + 1) as f64 / n))
            .collect();
        let color = COLORS[i % COLORS.len()];
        let p50 = quantile(values, 0.5) as f64 / 1000.0;
        let p99 = quantile(values, 0.99) as f64 / 1000.0;
        cdf.draw_series(LineSeries::new(points, color.stroke_width(2)))
            .map_err(|x| e(&x))?
            .label(format!("{label}: p50 {p50:.2} ms, p99 {p99:.2} ms"))
            .legend(move |(x, y)| {
                PathElement::new(vec![(x, y), (x + 18, y)], color.stroke_width(3))
            });
    }
    cdf.configure_series_labels()
        .position(SeriesLabelPosition::LowerRight)
        .label_font(("sans-serif", 14))
        .background_style(WHITE.mix(0.85))
        .border_style(BLACK)
        .draw()
        .map_err(|x| e(&x))?;

    // Right: histograms (share of events per bin), linear axis up to the 99.5th percentile.
    let cap = quantile(&all, 0.995) as f64 / 1000.0 * 1.05;
    let bins = 60usize;
    let width = cap / bins as f64;
    let hists: Vec<Vec<f64>> = series
        .iter()
        .map(|(_, values)| {
            let mut h = vec![0.0; bins];
            for v in values {
                let ms = *v as f64 / 1000.0;
                let b = ((ms / width) as usize).min(bins - 1);
                h[b] += 1.0;
            }
            let n = values.len().max(1) as f64;
            h.iter().map(|c| c / n).collect()
        })
        .collect();
    let top = hists
        .iter()
        .flat_map(|h| h.iter().copied())
        .fold(0.0f64, f64::max)
        * 1.1;
    let mut hist = ChartBuilder::on(&right)
        .caption("distribution (share of events per bin)", ("sans-serif", 18))
        .margin(14)
        .x_label_area_size(44)
        .y_label_area_size(56)
        .build_cartesian_2d(0.0..cap, 0.0..top.max(0.01))
        .map_err(|x| e(&x))?;
    hist.configure_mesh()
        .x_desc("latency per event (ms), up to the 99.5th percentile")
        .y_desc("share of events")
        .label_style(("sans-serif", 14))
        .draw()
        .map_err(|x| e(&x))?;
    for (i, ((label, _), h)) in series.iter().zip(&hists).enumerate() {
        let color = COLORS[i % COLORS.len()];
        let points: Vec<(f64, f64)> = h
            .iter()
            .enumerate()
            .flat_map(|(b, share)| {
                let x0 = b as f64 * width;
                [(x0, *share), (x0 + width, *share)]
            })
            .collect();
        hist.draw_series(LineSeries::new(points, color.stroke_width(2)))
            .map_err(|x| e(&x))?
            .label(label.clone())
            .legend(move |(x, y)| {
                PathElement::new(vec![(x, y), (x + 18, y)], color.stroke_width(3))
            });
    }
    hist.configure_series_labels()
        .position(SeriesLabelPosition::UpperRight)
        .label_font(("sans-serif", 14))
        .background_style(WHITE.mix(0.85))
        .border_style(BLACK)
        .draw()
        .map_err(|x| e(&x))?;
    root.present().map_err(|x| e(&x))?;
    Ok(())
}

/// One figure of a cold start (init ms, batch ms, peak RSS MB).
type ColdFigure = fn(&crate::coldstart::ColdStart) -> f64;
/// One part of a cost row, USD per million events.
type CostPart = fn(&crate::cost::CostRow) -> f64;

/// Cold start and cost side by side: left, the gate's and Powertools' init, first
/// cold batch of 10 and peak RSS (medians, log scale); right, dollars per million events of the
/// naive handler, the gate and Powertools, stacked by Lambda duration, Lambda requests and
/// DynamoDB.
///
/// # Errors
/// When the PNG cannot be drawn or written.
pub fn cold_and_cost_png(
    path: &Path,
    cold: &[crate::coldstart::ColdStart],
    cost: &[crate::cost::CostRow],
) -> Result<(), String> {
    register_font()?;
    let e = |e: &dyn std::fmt::Display| e.to_string();
    let root = BitMapBackend::new(path, (1400, 620)).into_drawing_area();
    root.fill(&WHITE).map_err(|x| e(&x))?;
    let root = root
        .titled(
            "What the gate costs a user, side by side with Powertools",
            ("sans-serif", 22),
        )
        .map_err(|x| e(&x))?;
    let (left, right) = root.split_horizontally(700);

    // Left: three figures per function, log scale.
    let figures: [(&str, ColdFigure); 3] = [
        ("init (ms)", |c| c.init_ms),
        ("first batch of 10 (ms)", |c| c.batch_ms),
        ("peak RSS (MB)", |c| c.peak_rss_mb),
    ];
    let top = cold
        .iter()
        .flat_map(|c| figures.iter().map(move |(_, f)| f(c)))
        .fold(1.0f64, f64::max)
        * 3.0;
    let mut chart = ChartBuilder::on(&left)
        .caption(
            "cold start under one fake Runtime API (medians)",
            ("sans-serif", 18),
        )
        .margin(14)
        .x_label_area_size(40)
        .y_label_area_size(56)
        .build_cartesian_2d(0.0f64..3.0, (0.5f64..top).log_scale())
        .map_err(|x| e(&x))?;
    chart
        .configure_mesh()
        .disable_x_mesh()
        .x_label_formatter(&|_| String::new())
        .y_desc("ms or MB (log scale)")
        .label_style(("sans-serif", 14))
        .draw()
        .map_err(|x| e(&x))?;
    let names: Vec<Text<(f64, f64), String>> = figures
        .iter()
        .enumerate()
        .map(|(k, (n, _))| {
            Text::new(
                (*n).to_string(),
                (k as f64 + 0.1, 0.75),
                ("sans-serif", 14).into_font(),
            )
        })
        .collect();
    chart.draw_series(names).map_err(|x| e(&x))?;
    let width = 0.8 / cold.len().max(1) as f64;
    for (i, c) in cold.iter().enumerate() {
        let color = COLORS[(i + 1) % COLORS.len()];
        let bars: Vec<Rectangle<(f64, f64)>> = figures
            .iter()
            .enumerate()
            .map(|(k, (_, f))| {
                let x0 = k as f64 + 0.1 + i as f64 * width;
                Rectangle::new([(x0, 0.9), (x0 + width * 0.95, f(c))], color.filled())
            })
            .collect();
        chart
            .draw_series(bars)
            .map_err(|x| e(&x))?
            .label(c.label.clone())
            .legend(move |(x, y)| Rectangle::new([(x, y - 6), (x + 14, y + 6)], color.filled()));
        let labels: Vec<Text<(f64, f64), String>> = figures
            .iter()
            .enumerate()
            .map(|(k, (_, f))| {
                let x0 = k as f64 + 0.1 + i as f64 * width;
                Text::new(
                    format!("{:.1}", f(c)),
                    (x0 + width * 0.1, f(c) * 1.15),
                    ("sans-serif", 14).into_font(),
                )
            })
            .collect();
        chart.draw_series(labels).map_err(|x| e(&x))?;
    }
    chart
        .configure_series_labels()
        .position(SeriesLabelPosition::UpperLeft)
        .label_font(("sans-serif", 14))
        .background_style(WHITE.mix(0.85))
        .border_style(BLACK)
        .draw()
        .map_err(|x| e(&x))?;

    // Right: dollars per million events, stacked.
    let top = cost.iter().map(|r| r.total_usd).fold(0.01f64, f64::max) * 1.25;
    let mut chart = ChartBuilder::on(&right)
        .caption(
            "USD per million events, 3 % duplicates (arm64, on-demand)",
            ("sans-serif", 18),
        )
        .margin(14)
        .x_label_area_size(40)
        .y_label_area_size(56)
        .build_cartesian_2d(0.0f64..cost.len().max(1) as f64, -top * 0.06..top)
        .map_err(|x| e(&x))?;
    chart
        .configure_mesh()
        .disable_x_mesh()
        .x_label_formatter(&|_| String::new())
        .y_desc("USD per million events")
        .label_style(("sans-serif", 14))
        .draw()
        .map_err(|x| e(&x))?;
    let parts: [(&str, RGBColor, CostPart); 3] = [
        ("Lambda duration", RGBColor(230, 140, 40), |r| {
            r.lambda_duration_usd
        }),
        ("Lambda requests", RGBColor(150, 150, 150), |r| {
            r.lambda_requests_usd
        }),
        ("DynamoDB", RGBColor(30, 110, 200), |r| r.dynamodb_usd),
    ];
    for (k, (label, color, f)) in parts.iter().enumerate() {
        let color = *color;
        let bars: Vec<Rectangle<(f64, f64)>> = cost
            .iter()
            .enumerate()
            .map(|(i, r)| {
                let below: f64 = parts[..k].iter().map(|(_, _, g)| g(r)).sum();
                let x0 = i as f64 + 0.2;
                Rectangle::new([(x0, below), (x0 + 0.6, below + f(r))], color.filled())
            })
            .collect();
        chart
            .draw_series(bars)
            .map_err(|x| e(&x))?
            .label(*label)
            .legend(move |(x, y)| Rectangle::new([(x, y - 6), (x + 14, y + 6)], color.filled()));
    }
    let totals: Vec<Text<(f64, f64), String>> = cost
        .iter()
        .enumerate()
        .map(|(i, r)| {
            Text::new(
                format!("${:.2}", r.total_usd),
                (i as f64 + 0.35, r.total_usd + top * 0.02),
                ("sans-serif", 15).into_font(),
            )
        })
        .collect();
    chart.draw_series(totals).map_err(|x| e(&x))?;
    let names: Vec<Text<(f64, f64), String>> = cost
        .iter()
        .enumerate()
        .map(|(i, r)| {
            Text::new(
                format!("{} ({} MB)", r.handler, r.memory_mb),
                (i as f64 + 0.2, -top * 0.035),
                ("sans-serif", 14).into_font(),
            )
        })
        .collect();
    chart.draw_series(names).map_err(|x| e(&x))?;
    chart
        .configure_series_labels()
        .position(SeriesLabelPosition::UpperLeft)
        .label_font(("sans-serif", 14))
        .background_style(WHITE.mix(0.85))
        .border_style(BLACK)
        .draw()
        .map_err(|x| e(&x))?;
    root.present().map_err(|x| e(&x))?;
    Ok(())
}
