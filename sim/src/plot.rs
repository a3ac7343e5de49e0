//! `sim replay SCENARIO --plot FILE.png`: each signal over simulated time with its threshold, and
//! a vertical line where each alarm fired. Three panels sharing the time axis (hours after the
//! scenario's start): the duplicate ratio per hour (the hourly alarm's view; hours with too few
//! records to be judged drawn hollow), the age of the oldest `in_flight` record, and per minute the
//! distinct slot ids for one key and the natural-key collisions. Text is drawn with DejaVu Sans
//! embedded in the binary (plotters' `ab_glyph` backend), as the benchmark's plot does.

use std::path::Path;

use gate::signals::{self, DUPLICATE_RATIO_HIGH_1H};
use plotters::prelude::*;
use plotters::style::FontStyle;

use crate::signals::SignalSummary;

const RATIO: RGBColor = RGBColor(30, 110, 200);
const AGE: RGBColor = RGBColor(60, 150, 60);
const SLOTS: RGBColor = RGBColor(140, 80, 170);
const COLLISIONS: RGBColor = RGBColor(230, 140, 20);
const THRESHOLD: RGBColor = RGBColor(70, 70, 70);

fn err(e: impl std::fmt::Display) -> String {
    e.to_string()
}

/// Draws the signals of `summary` to `path` (PNG, 1100 x 820), `title` on top.
///
/// # Errors
/// When the embedded font cannot be registered or the PNG cannot be drawn or written.
pub fn signals_png(path: &Path, title: &str, summary: &SignalSummary) -> Result<(), String> {
    plotters::style::register_font("sans-serif", FontStyle::Normal, dejavu::sans::regular())
        .map_err(|_| "the embedded DejaVu Sans font is not readable".to_string())?;
    let s = &summary.series;
    let hours = |at_s: i64| at_s as f64 / 3_600.0;
    let end_s = s
        .hourly
        .iter()
        .map(|h| h.0)
        .chain(s.oldest_in_flight.iter().map(|a| a.0))
        .chain(s.per_minute.iter().map(|m| m.0))
        .chain(summary.firings.iter().map(|f| f.at_s))
        .max()
        .unwrap_or(3_600);
    let x_max = hours(end_s).max(1.0) * 1.02;
    let root = BitMapBackend::new(path, (1100, 820)).into_drawing_area();
    root.fill(&WHITE).map_err(err)?;
    let root = root.titled(title, ("sans-serif", 22)).map_err(err)?;
    let panels = root.split_evenly((3, 1));
    let fired: Vec<(f64, String)> = summary
        .firings
        .iter()
        .map(|f| (hours(f.at_s), f.alarm.clone()))
        .collect();

    // Panel 1: the duplicate ratio per hour.
    let mut c = ChartBuilder::on(&panels[0])
        .caption(
            "signal 1: duplicate ratio per hour (conflicts on reserve / received)",
            ("sans-serif", 17),
        )
        .margin(10)
        .x_label_area_size(34)
        .y_label_area_size(60)
        .build_cartesian_2d(0.0..x_max, 0.0f64..1.0)
        .map_err(err)?;
    c.configure_mesh()
        .x_desc("hours after the start")
        .y_desc("ratio")
        .label_style(("sans-serif", 13))
        .light_line_style(WHITE)
        .draw()
        .map_err(err)?;
    let ratio = |received: u64, duplicates: u64| duplicates as f64 / received.max(1) as f64;
    c.draw_series(
        s.hourly
            .iter()
            .filter(|h| h.1 >= DUPLICATE_RATIO_HIGH_1H.min_received)
            .map(|h| Circle::new((hours(h.0) - 0.5, ratio(h.1, h.2)), 3, RATIO.filled())),
    )
    .map_err(err)?
    .label("hours with enough records to be judged")
    .legend(|(x, y)| Circle::new((x + 9, y), 4, RATIO.filled()));
    c.draw_series(
        s.hourly
            .iter()
            .filter(|h| h.1 < DUPLICATE_RATIO_HIGH_1H.min_received)
            .map(|h| {
                Circle::new(
                    (hours(h.0) - 0.5, ratio(h.1, h.2)),
                    3,
                    RATIO.stroke_width(1),
                )
            }),
    )
    .map_err(err)?;
    c.draw_series(LineSeries::new(
        [
            (0.0, signals::DUPLICATE_RATIO_HIGH),
            (x_max, signals::DUPLICATE_RATIO_HIGH),
        ],
        THRESHOLD.stroke_width(2),
    ))
    .map_err(err)?
    .label("alarm above 20 % (with enough records and duplicates)")
    .legend(|(x, y)| PathElement::new(vec![(x, y), (x + 18, y)], THRESHOLD.stroke_width(2)));
    draw_firings(&mut c, &fired, 1.0)?;
    legend(&mut c, SeriesLabelPosition::LowerRight)?;

    // Panel 2: the oldest in_flight age.
    let age_max = s
        .oldest_in_flight
        .iter()
        .map(|a| a.1)
        .max()
        .unwrap_or(0)
        .max(signals::OLDEST_IN_FLIGHT_MAX_S) as f64
        * 1.2;
    let mut c = ChartBuilder::on(&panels[1])
        .caption(
            "signal 2: age of the oldest in_flight record (s)",
            ("sans-serif", 17),
        )
        .margin(10)
        .x_label_area_size(34)
        .y_label_area_size(60)
        .build_cartesian_2d(0.0..x_max, 0.0..age_max)
        .map_err(err)?;
    c.configure_mesh()
        .x_desc("hours after the start")
        .y_desc("seconds")
        .label_style(("sans-serif", 13))
        .light_line_style(WHITE)
        .draw()
        .map_err(err)?;
    c.draw_series(LineSeries::new(
        s.oldest_in_flight.iter().map(|a| (hours(a.0), a.1 as f64)),
        AGE.stroke_width(2),
    ))
    .map_err(err)?
    .label("oldest in_flight age (metrics function, every minute)")
    .legend(|(x, y)| PathElement::new(vec![(x, y), (x + 18, y)], AGE.stroke_width(3)));
    let limit = signals::OLDEST_IN_FLIGHT_MAX_S as f64;
    c.draw_series(LineSeries::new(
        [(0.0, limit), (x_max, limit)],
        THRESHOLD.stroke_width(2),
    ))
    .map_err(err)?
    .label("alarm above 600 s")
    .legend(|(x, y)| PathElement::new(vec![(x, y), (x + 18, y)], THRESHOLD.stroke_width(2)));
    draw_firings(&mut c, &fired, age_max)?;
    legend(&mut c, SeriesLabelPosition::UpperRight)?;

    // Panel 3: distinct slot ids and natural-key collisions per minute.
    let top = s
        .per_minute
        .iter()
        .map(|m| m.1.max(m.2))
        .max()
        .unwrap_or(0)
        .max(3) as f64
        + 0.5;
    let mut c = ChartBuilder::on(&panels[2])
        .caption(
            "signals 3 and 4: distinct slot ids for one key, natural-key collisions (per minute)",
            ("sans-serif", 17),
        )
        .margin(10)
        .x_label_area_size(34)
        .y_label_area_size(60)
        .build_cartesian_2d(0.0..x_max, 0.0..top)
        .map_err(err)?;
    c.configure_mesh()
        .x_desc("hours after the start")
        .y_desc("count")
        .label_style(("sans-serif", 13))
        .light_line_style(WHITE)
        .draw()
        .map_err(err)?;
    c.draw_series(
        s.per_minute
            .iter()
            .filter(|m| m.1 >= signals::DISTINCT_EFFECT_IDS_ALARM)
            .map(|m| Cross::new((hours(m.0), m.1 as f64), 4, SLOTS.stroke_width(2))),
    )
    .map_err(err)?
    .label("distinct slot ids for one key, shown from 2 (healthy: 1; alarm at 2)")
    .legend(|(x, y)| Cross::new((x + 9, y), 4, SLOTS.stroke_width(2)));
    c.draw_series(
        s.per_minute
            .iter()
            .filter(|m| m.2 > 0)
            .map(|m| TriangleMarker::new((hours(m.0), m.2 as f64), 5, COLLISIONS.filled())),
    )
    .map_err(err)?
    .label("natural-key collisions (alarm at 1)")
    .legend(|(x, y)| TriangleMarker::new((x + 9, y), 5, COLLISIONS.filled()));
    let slots = signals::DISTINCT_EFFECT_IDS_ALARM as f64;
    c.draw_series(LineSeries::new(
        [(0.0, slots), (x_max, slots)],
        THRESHOLD.stroke_width(2),
    ))
    .map_err(err)?;
    draw_firings(&mut c, &fired, top)?;
    legend(&mut c, SeriesLabelPosition::UpperRight)?;
    root.present().map_err(err)?;
    Ok(())
}

type Chart<'a, 'b> = ChartContext<
    'a,
    BitMapBackend<'b>,
    Cartesian2d<plotters::coord::types::RangedCoordf64, plotters::coord::types::RangedCoordf64>,
>;

/// One color per alarm, in the order the alarms first fired.
const ALARM_COLORS: [RGBColor; 6] = [
    RGBColor(210, 40, 40),
    RGBColor(230, 120, 0),
    RGBColor(160, 30, 140),
    RGBColor(0, 140, 140),
    RGBColor(120, 80, 20),
    RGBColor(90, 90, 200),
];

/// A dashed vertical line at each firing, one color and one legend entry per alarm (its name,
/// when it first fired and how many times).
fn draw_firings<'a, 'b: 'a>(
    c: &mut Chart<'a, 'b>,
    fired: &[(f64, String)],
    top: f64,
) -> Result<(), String> {
    let mut names: Vec<&str> = Vec::new();
    for (_, name) in fired {
        if !names.contains(&name.as_str()) {
            names.push(name);
        }
    }
    for (i, name) in names.iter().enumerate() {
        let color = ALARM_COLORS[i % ALARM_COLORS.len()];
        let times: Vec<f64> = fired
            .iter()
            .filter(|(_, n)| n == name)
            .map(|(x, _)| *x)
            .collect();
        let dashes = times.iter().flat_map(|x| {
            (0..30).map(move |k| {
                let y0 = top * k as f64 / 30.0;
                PathElement::new(vec![(*x, y0), (*x, y0 + top / 60.0)], color.stroke_width(2))
            })
        });
        let label = match times.len() {
            1 => format!("{name} fired at {:.1} h", times[0]),
            n => format!(
                "{name} fired at {:.1} h (and {} more times)",
                times[0],
                n - 1
            ),
        };
        c.draw_series(dashes)
            .map_err(err)?
            .label(label)
            .legend(move |(x, y)| {
                PathElement::new(vec![(x, y), (x + 18, y)], color.stroke_width(2))
            });
    }
    Ok(())
}

fn legend<'a, 'b: 'a>(c: &mut Chart<'a, 'b>, position: SeriesLabelPosition) -> Result<(), String> {
    c.configure_series_labels()
        .position(position)
        .label_font(("sans-serif", 13))
        .background_style(WHITE.mix(0.85))
        .border_style(BLACK)
        .draw()
        .map_err(err)
}
