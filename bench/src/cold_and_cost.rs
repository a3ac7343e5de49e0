//! The cold-start and cost tables: the gate against Powertools at cold start, the priced rows of
//! each handler, and the totals side by side at each share of duplicates.

use std::collections::BTreeMap;

use serde::Serialize;

use crate::{coldstart, cost};

/// The priced rows at one share of duplicates.
#[derive(Debug, Serialize)]
pub(crate) struct CostAt {
    pub duplicate_rate: f64,
    pub rows: Vec<cost::CostRow>,
}

/// The cold-start table: gate and Powertools, medians, and the ratio.
pub(crate) fn print_cold(cold: &[coldstart::ColdStart]) {
    let Some(trials) = cold.first().map(|c| c.trials.len()) else {
        return;
    };
    println!(
        "\nCold start under the same fake Runtime API ({trials} trials each, medians; spread lowest-highest):\n"
    );
    println!("| function | init to first `next` | first batch of 10 (cold) | peak RSS |");
    println!("| --- | ---: | ---: | ---: |");
    let spread = |c: &coldstart::ColdStart, f: fn(&coldstart::Trial) -> f64| {
        let v: Vec<f64> = c.trials.iter().map(f).collect();
        let lo = v.iter().copied().fold(f64::INFINITY, f64::min);
        let hi = v.iter().copied().fold(f64::NEG_INFINITY, f64::max);
        format!("{lo:.1}-{hi:.1}")
    };
    for c in cold {
        println!(
            "| {} | {:.1} ms ({}) | {:.1} ms ({}) | {:.1} MB ({}) |",
            c.label,
            c.init_ms,
            spread(c, |t| t.init_ms),
            c.batch_ms,
            spread(c, |t| t.batch_ms),
            c.peak_rss_mb,
            spread(c, |t| t.peak_rss_kb as f64 * 1024.0 / 1e6),
        );
    }
    if let (Some(g), Some(p)) = (
        cold.iter().find(|c| c.label == "gate"),
        cold.iter().find(|c| c.label == "powertools"),
    ) {
        println!(
            "| **gate / Powertools** | **{:.3}x** | **{:.2}x** | **{:.2}x** |",
            g.init_ms / p.init_ms,
            g.batch_ms / p.batch_ms,
            g.peak_rss_mb / p.peak_rss_mb
        );
    }
}

/// The priced rows: naive and the gate at 128 MB, Powertools and the fair peer each at the
/// smallest measured memory whose batch of new events takes at most 10 % longer than at its
/// fastest size (the fastest, not the largest: on a shared machine one size's run can be slow for
/// reasons of its own).
pub(crate) fn cost_rows(
    runs: &[cost::CostRun],
    sizes: &BTreeMap<String, usize>,
    duplicate_rate: f64,
) -> Vec<cost::CostRow> {
    let largest = |kind: &str| {
        sizes
            .iter()
            .filter(|(k, _)| k.starts_with(kind))
            .map(|(_, v)| *v)
            .max()
            .unwrap_or(0)
    };
    let mut rows = Vec::new();
    for kind in ["naive", "gate"] {
        if let Some(r) = runs
            .iter()
            .find(|r| r.handler == kind && r.memory_mb == 128)
        {
            rows.push(cost::row(r, largest(kind), duplicate_rate));
        }
    }
    for kind in ["powertools", "fair-peer"] {
        let pt: Vec<&cost::CostRun> = runs.iter().filter(|r| r.handler == kind).collect();
        let fastest = pt
            .iter()
            .map(|r| r.new_batch_ms)
            .fold(f64::INFINITY, f64::min);
        if let Some(chosen) = pt
            .iter()
            .filter(|r| r.new_batch_ms <= 1.1 * fastest)
            .min_by_key(|r| r.memory_mb)
        {
            rows.push(cost::row(chosen, largest(kind), duplicate_rate));
        }
    }
    rows
}

pub(crate) fn print_cost(
    runs: &[cost::CostRun],
    rows: &[cost::CostRow],
    sizes: &BTreeMap<String, usize>,
    duplicate_rate: f64,
) {
    let p = &cost::PRICES;
    println!(
        "\nMeasured per batch of 10 (medians; each function with the CPU share of its memory; moto behind a 5 ms latency floor; terminal simulator):\n"
    );
    println!("| handler | memory | new: duration (lowest-highest) / billed / CPU | duplicates: duration (lowest-highest) / billed / CPU | DynamoDB requests per new event / per duplicate | peak RSS |");
    println!("| --- | ---: | ---: | ---: | --- | ---: |");
    let ops = |m: &BTreeMap<String, f64>| {
        m.iter()
            .map(|(k, v)| format!("{v:.2} {k}"))
            .collect::<Vec<_>>()
            .join(" + ")
    };
    for r in runs {
        println!(
            "| {} | {} MB | {:.1} ({:.0}-{:.0}) / {:.0} / {:.1} ms | {:.1} ({:.0}-{:.0}) / {:.0} / {:.1} ms | {} / {} | {:.1} MB |",
            r.handler,
            r.memory_mb,
            r.new_batch_ms,
            r.new_batch_range_ms.0,
            r.new_batch_range_ms.1,
            r.new_billed_ms,
            r.new_cpu_ms,
            r.dup_batch_ms,
            r.dup_batch_range_ms.0,
            r.dup_batch_range_ms.1,
            r.dup_billed_ms,
            r.dup_cpu_ms,
            ops(&r.calls_per_new),
            ops(&r.calls_per_dup),
            r.peak_rss_mb
        );
    }
    println!("\nLargest item written (bytes, DynamoDB's item size rules): {sizes:?}");
    println!(
        "\nDollars per million events at {:.0} % duplicates (Lambda arm64 ${}/GB-s, ${}/M requests, batches of 10; DynamoDB on-demand ${}/M WRU, ${}/M RRU; {} prices read {}):\n",
        duplicate_rate * 100.0,
        p.lambda_arm64_gb_s,
        p.lambda_requests_per_million,
        p.dynamodb_wru_per_million,
        p.dynamodb_rru_per_million,
        p.region,
        p.read_on
    );
    println!("| handler | memory | billed ms per new event / duplicate | WRU per new event / duplicate | Lambda duration | Lambda requests | DynamoDB | **total per million events** |");
    println!("| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |");
    for r in rows {
        println!(
            "| {} | {} MB | {:.2} / {:.2} | {:.0} / {:.0} | ${:.3} | ${:.3} | ${:.3} | **${:.2}** |",
            r.handler,
            r.memory_mb,
            r.billed_ms_new,
            r.billed_ms_dup,
            r.units_new.wru,
            r.units_dup.wru,
            r.lambda_duration_usd,
            r.lambda_requests_usd,
            r.dynamodb_usd,
            r.total_usd
        );
    }
    let get = |k: &str| rows.iter().find(|r| r.handler == k);
    if let (Some(g), Some(p), Some(n)) = (get("gate"), get("powertools"), get("naive")) {
        println!(
            "\ngate / Powertools: {:.2}x; gate / naive: {:.2}x",
            g.total_usd / p.total_usd,
            g.total_usd / n.total_usd
        );
    }
    if let (Some(g), Some(f)) = (get("gate"), get("fair-peer")) {
        println!("gate / fair peer: {:.2}x", g.total_usd / f.total_usd);
    }
}

/// The side-by-side table: each handler's total at each share of duplicates.
pub(crate) fn print_cost_side_by_side(by_rate: &[CostAt]) {
    let Some(first) = by_rate.first() else {
        return;
    };
    let rates: Vec<String> = by_rate
        .iter()
        .map(|c| format!("{:.0} %", c.duplicate_rate * 100.0))
        .collect();
    println!(
        "\nSide by side, one run ({} prices read {}), total per million events at {}:\n",
        cost::PRICES.region,
        cost::PRICES.read_on,
        rates.join(" / ")
    );
    println!(
        "| handler | memory | WRU per new event / duplicate | DynamoDB at {r} | Lambda at {r} | **total at {r}** |",
        r = rates.join(" / ")
    );
    println!("| --- | ---: | ---: | ---: | ---: | ---: |");
    let join = |f: &dyn Fn(&cost::CostRow) -> f64, handler: &str, bold: bool| {
        by_rate
            .iter()
            .filter_map(|c| c.rows.iter().find(|r| r.handler == handler))
            .map(|r| {
                if bold {
                    format!("${:.2}", f(r))
                } else {
                    format!("${:.3}", f(r))
                }
            })
            .collect::<Vec<_>>()
            .join(" / ")
    };
    for r in &first.rows {
        println!(
            "| {} | {} MB | {:.0} / {:.0} | {} | {} | **{}** |",
            r.handler,
            r.memory_mb,
            r.units_new.wru,
            r.units_dup.wru,
            join(&|x| x.dynamodb_usd, &r.handler, false),
            join(
                &|x| x.lambda_duration_usd + x.lambda_requests_usd,
                &r.handler,
                false
            ),
            join(&|x| x.total_usd, &r.handler, true),
        );
    }
    for c in by_rate {
        let get = |k: &str| c.rows.iter().find(|r| r.handler == k).map(|r| r.total_usd);
        if let Some(g) = get("gate") {
            let ratio = |k: &str| {
                get(k)
                    .map(|x| format!("{:.2}x", g / x))
                    .unwrap_or_else(|| "-".into())
            };
            println!(
                "at {:.0} %: gate / fair peer {}, gate / Powertools {}",
                c.duplicate_rate * 100.0,
                ratio("fair-peer"),
                ratio("powertools")
            );
        }
    }
}
