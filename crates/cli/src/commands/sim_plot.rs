//! `berth sim --plot out.svg`: the compared policies over the trace's time, one line each, in
//! three panels: jobs waiting in the queue, the share of the cluster allocated (GPUs for GPU
//! traces, CPUs for CPU traces), and the mean wait of the jobs that started in each period;
//! and a fourth, the distribution of job completion times (a CDF over log hours).
//!
//! The series come from each replay's per-job outcomes (submit, first start, last end), so
//! the simulator stays as it is; a job preempted and restarted counts as running from its
//! first start to its last end. Drawn with `plotters` into a self-contained SVG (text as SVG
//! text, no font files, no network).

use std::path::Path;

use berth_sched::sim::{Cluster, JobOutcome, Trace, TraceFormat};
use plotters::prelude::*;

/// Periods the trace's time is cut into: fine enough to see a day's swings on Philly (about
/// 80 days), few enough that the SVG stays small.
const PERIODS: usize = 400;

/// One policy's lines.
#[derive(Debug, Clone, PartialEq)]
pub struct Series {
    pub policy: String,
    /// (days since the first submit, jobs waiting at the period's end)
    pub queue: Vec<(f64, f64)>,
    /// (days, share of the cluster's GPUs or CPUs allocated over the period, 0 to 1)
    pub allocated: Vec<(f64, f64)>,
    /// (days, mean wait in hours of the jobs that started in the period); periods in which no
    /// job started have no point.
    pub wait: Vec<(f64, f64)>,
    /// (log10 of the JCT in hours, share of finished jobs with that JCT or less): the CDF at
    /// [`CDF_POINTS`] quantiles.
    pub jct: Vec<(f64, f64)>,
}

/// Quantiles drawn of each policy's JCT distribution.
const CDF_POINTS: usize = 200;

/// JCTs shorter than this are drawn at it (the log axis has no zero).
const MIN_JCT_H: f64 = 1.0 / 60.0;

const DAY_MS: f64 = 86_400_000.0;

/// The series of one replay. `end_ms` is the end of the time axis (the same for every policy
/// compared, so their lines share it).
pub fn series(policy: &str, trace: &Trace, cluster: &Cluster, outcomes: &[JobOutcome], end_ms: i64) -> Series {
    let gpu = trace.format == TraceFormat::Philly || trace.jobs.iter().any(|j| j.gpus > 0);
    let capacity =
        f64::from(cluster.nodes) * f64::from(if gpu { cluster.gpus_per_node } else { cluster.cpus_per_node }).max(1.0);
    let width = (end_ms.max(1) as f64 / PERIODS as f64).max(1.0);
    let period = |t: i64| ((t.max(0) as f64 / width) as usize).min(PERIODS - 1);
    // Queue at the end of each period: +1 in the period of the submit, −1 in that of the
    // start (or of the end of a job that never started).
    let mut queue_delta = vec![0i64; PERIODS];
    let mut busy = vec![0.0f64; PERIODS];
    let mut waits = vec![(0.0f64, 0u32); PERIODS];
    let mut jcts: Vec<f64> = outcomes
        .iter()
        .filter(|o| o.finished)
        .filter_map(|o| o.end_ms.map(|e| ((e - o.submit_ms) as f64 / 3_600_000.0).max(MIN_JCT_H)))
        .collect();
    jcts.sort_by(f64::total_cmp);
    let jct = (1..=CDF_POINTS)
        .filter(|_| !jcts.is_empty())
        .map(|k| {
            let q = k as f64 / CDF_POINTS as f64;
            let i = ((q * jcts.len() as f64).ceil() as usize).clamp(1, jcts.len()) - 1;
            (jcts[i].log10(), q)
        })
        .collect();
    for (job, o) in trace.jobs.iter().zip(outcomes) {
        let leaves = o.start_ms.or(o.end_ms);
        queue_delta[period(o.submit_ms)] += 1;
        if let Some(t) = leaves {
            queue_delta[period(t)] -= 1;
        }
        let (Some(start), Some(end)) = (o.start_ms, o.end_ms) else { continue };
        let w = &mut waits[period(start)];
        *w = (w.0 + (start - o.submit_ms) as f64 / 3_600_000.0, w.1 + 1);
        let amount = f64::from(if gpu { job.gpus } else { job.cpus });
        // Spread its run over the periods it overlaps, in proportion to the overlap.
        let (first, last) = (period(start), period(end));
        for (p, b) in busy.iter_mut().enumerate().take(last + 1).skip(first) {
            let (lo, hi) = (p as f64 * width, (p + 1) as f64 * width);
            let overlap = (end as f64).min(hi) - (start as f64).max(lo);
            if overlap > 0.0 {
                *b += amount * overlap;
            }
        }
    }
    let day = |p: usize| (p + 1) as f64 * width / DAY_MS;
    let mut waiting = 0i64;
    let queue = (0..PERIODS)
        .map(|p| {
            waiting += queue_delta[p];
            (day(p), waiting as f64)
        })
        .collect();
    let allocated = busy.iter().enumerate().map(|(p, b)| (day(p), (b / (capacity * width)).min(1.0))).collect();
    let wait = waits.iter().enumerate().filter(|(_, w)| w.1 > 0).map(|(p, w)| (day(p), w.0 / f64::from(w.1))).collect();
    Series { policy: policy.to_string(), queue, allocated, wait, jct }
}

/// The last moment any replay reached (the shared end of the time axis).
pub fn end_ms(outcomes: &[Vec<JobOutcome>]) -> i64 {
    outcomes.iter().flatten().filter_map(|o| o.end_ms.or(o.start_ms).or(Some(o.submit_ms))).max().unwrap_or(1)
}

/// `0.05`, `3.2`, `120`: an hour count with two or three digits.
fn hours(h: f64) -> String {
    if h >= 10.0 {
        format!("{h:.0}")
    } else if h >= 1.0 {
        format!("{h:.1}")
    } else {
        format!("{h:.2}")
    }
}

/// Draws the four panels into an SVG file at `path`.
pub fn draw(path: &Path, title: &str, series: &[Series]) -> anyhow::Result<()> {
    draw_svg(path, title, series).map_err(|e| anyhow::anyhow!("cannot draw the plot into {}: {e}", path.display()))
}

type Pick = fn(&Series) -> &[(f64, f64)];

fn draw_svg(path: &Path, title: &str, series: &[Series]) -> Result<(), Box<dyn std::error::Error + Send + Sync>> {
    let root = SVGBackend::new(path, (1200, 1450)).into_drawing_area();
    root.fill(&WHITE)?;
    let root = root.titled(title, ("sans-serif", 22))?;
    let panels: [(&str, &str, Pick); 3] = [
        ("Jobs waiting", "jobs", |s| &s.queue),
        ("Cluster allocated", "share of capacity", |s| &s.allocated),
        ("Mean wait of the jobs starting", "hours", |s| &s.wait),
    ];
    let x_max = series.iter().flat_map(|s| s.queue.last()).map(|p| p.0).fold(0.0, f64::max).max(1e-3);
    let areas = root.split_evenly((4, 1));
    for (area, (caption, unit, pick)) in areas.iter().zip(panels) {
        let y_max = series.iter().flat_map(|s| pick(s).iter().map(|p| p.1)).fold(0.0, f64::max);
        let y_max = if unit == "share of capacity" { 1.0 } else { (y_max * 1.05).max(1.0) };
        let mut chart = ChartBuilder::on(area)
            .caption(caption, ("sans-serif", 17))
            .margin(12)
            .x_label_area_size(36)
            .y_label_area_size(64)
            .build_cartesian_2d(0f64..x_max, 0f64..y_max)?;
        chart.configure_mesh().x_desc("days since the first submit").y_desc(unit).light_line_style(WHITE).draw()?;
        for (i, s) in series.iter().enumerate() {
            let color = Palette99::pick(i).to_rgba();
            chart
                .draw_series(LineSeries::new(pick(s).iter().copied(), color.stroke_width(2)))?
                .label(s.policy.clone())
                .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], color.stroke_width(2)));
        }
        chart.configure_series_labels().background_style(WHITE.mix(0.85)).border_style(BLACK).draw()?;
    }
    let points = || series.iter().flat_map(|s| s.jct.iter().map(|p| p.0));
    let (lo, hi) = (points().fold(f64::MAX, f64::min).min(0.0), points().fold(f64::MIN, f64::max).max(1.0));
    let mut chart = ChartBuilder::on(&areas[3])
        .caption("Job completion time (share of jobs done within)", ("sans-serif", 17))
        .margin(12)
        .x_label_area_size(36)
        .y_label_area_size(64)
        .build_cartesian_2d(lo..hi, 0f64..1f64)?;
    chart
        .configure_mesh()
        .x_desc("JCT, hours (log scale)")
        .x_label_formatter(&|x| hours(10f64.powf(*x)))
        .y_desc("share of jobs")
        .light_line_style(WHITE)
        .draw()?;
    for (i, s) in series.iter().enumerate() {
        let color = Palette99::pick(i).to_rgba();
        chart
            .draw_series(LineSeries::new(s.jct.iter().copied(), color.stroke_width(2)))?
            .label(s.policy.clone())
            .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], color.stroke_width(2)));
    }
    chart
        .configure_series_labels()
        .position(SeriesLabelPosition::LowerRight)
        .background_style(WHITE.mix(0.85))
        .border_style(BLACK)
        .draw()?;
    root.present()?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use berth_sched::sim::TraceJob;

    fn job(submit_ms: i64, gpus: u32) -> TraceJob {
        TraceJob {
            submit_ms,
            duration_ms: 0,
            gpus,
            cpus: 0,
            user: "u".into(),
            time_limit_ms: None,
            priority: 0,
            line: 1,
        }
    }

    /// Two 8-GPU jobs on one 8-GPU node over 400 periods of 1 s: the first runs the first
    /// half, the second waits for it and runs the second half.
    #[test]
    fn queue_allocation_and_wait_follow_the_outcomes() {
        let trace = Trace {
            format: TraceFormat::Philly,
            jobs: vec![job(0, 8), job(0, 8)],
            notes: vec![],
            has_priorities: false,
        };
        let cluster = Cluster { nodes: 1, gpus_per_node: 8, cpus_per_node: 8, mem_per_node: 1 << 30 };
        let half = 200_000;
        let outcomes = [
            JobOutcome { submit_ms: 0, start_ms: Some(0), end_ms: Some(half), duration_ms: half, finished: true },
            JobOutcome {
                submit_ms: 0,
                start_ms: Some(half),
                end_ms: Some(2 * half),
                duration_ms: half,
                finished: true,
            },
        ];
        let end = end_ms(&[outcomes.to_vec()]);
        let s = series("fifo", &trace, &cluster, &outcomes, end);
        // The second job waits until 200 s, the end of period 199.
        assert_eq!((s.queue[0].1, s.queue[199].1, s.queue[200].1, s.queue[399].1), (1.0, 1.0, 0.0, 0.0));
        assert!(s.allocated.iter().all(|p| (p.1 - 1.0).abs() < 1e-9), "always full: {:?}", &s.allocated[..3]);
        assert_eq!(s.wait, vec![(1000.0 / DAY_MS, 0.0), (201_000.0 / DAY_MS, half as f64 / 3_600_000.0)]);
        // JCTs 200 s and 400 s: half the jobs within the first, all within the second.
        let h = |ms: f64| (ms / 3_600_000.0).log10();
        assert_eq!(s.jct.len(), CDF_POINTS);
        assert_eq!(
            (s.jct[99], s.jct[100], s.jct[199]),
            ((h(200_000.0), 0.5), (h(400_000.0), 0.505), (h(400_000.0), 1.0))
        );

        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("plot.svg");
        draw(&path, "test", &[s.clone(), Series { policy: "backfill".into(), ..s }]).unwrap();
        let svg = std::fs::read_to_string(&path).unwrap();
        assert!(svg.starts_with("<svg") && svg.contains("Jobs waiting") && svg.contains("backfill"), "{svg:.300}");
        assert!(svg.contains("Job completion time"), "the JCT panel is drawn");
        assert!(!svg.contains("http://") || !svg.contains("<script"), "self-contained, no scripts");
    }
}
