//! The slowdown chart (`compare.svg`).

use plotters::prelude::*;

use std::path::Path;

use super::summary::{noise_pp, slow_row, slowdown_of, Spread};
use crate::bench::compare::plan::{rate_label, Plan, Suite};
use crate::bench::compare::profiler::Profiler;
use crate::bench::compare::results::Results;

/// Grouped bars: the median slowdown of every profiler at each slowdown rate, with min–max
/// whiskers, over a grey band of each interpreter's noise (two standard errors).
pub(super) fn chart(
    path: &Path,
    suites: &[Suite],
    plan: &Plan,
    results: &Results,
) -> Result<(), Box<dyn std::error::Error>> {
    use plotters::style::text_anchor::{HPos, Pos, VPos};

    let groups: Vec<(usize, Profiler)> = suites
        .iter()
        .enumerate()
        .flat_map(|(si, s)| s.profilers.iter().map(move |&p| (si, p)))
        .collect();
    let rates = &plan.slowdown_rates_hz;
    let values: Vec<Vec<Option<Spread>>> = groups
        .iter()
        .map(|&(si, p)| {
            rates
                .iter()
                .map(|&r| slowdown_of(results, si, p, r))
                .collect()
        })
        .collect();
    let noise: Vec<Option<f64>> = (0..suites.len())
        .map(|si| noise_pp(slow_row(results, si, Profiler::None, 0)?, plan.reps))
        .collect();
    let all: Vec<f64> = values
        .iter()
        .flatten()
        .flatten()
        .flat_map(|s| [s.min, s.max])
        .chain(noise.iter().flatten().flat_map(|n| [*n, -*n]))
        .collect();
    let top = all.iter().copied().fold(1.0, f64::max);
    let bottom = all.iter().copied().fold(0.0, f64::min);
    let pad = (top - bottom) * 0.08;
    let (top, bottom) = (top + pad, bottom - pad);
    let n = groups.len();
    let root = SVGBackend::new(path, (1200, 560)).into_drawing_area();
    root.fill(&WHITE)?;
    let mut chart = ChartBuilder::on(&root)
        .caption(
            "Target slowdown per profiler: median, min-max whiskers, grey = noise (lower is \
             better)",
            ("sans-serif", 20),
        )
        .margin(16)
        .x_label_area_size(40)
        .y_label_area_size(60)
        .build_cartesian_2d(-0.5f64..(n as f64 - 0.5), bottom..top)?;
    let label = |x: &f64| {
        let i = x.round();
        if (x - i).abs() > 1e-6 || i < 0.0 || i as usize >= n {
            return String::new();
        }
        let (si, p) = groups[i as usize];
        format!("{} ({})", p.short(), suites[si].interp.name)
    };
    chart
        .configure_mesh()
        .disable_x_mesh()
        .light_line_style(TRANSPARENT)
        .x_labels(n + 1)
        .x_label_formatter(&label)
        .y_desc("slowdown (%)")
        .draw()?;
    // The noise band of each interpreter, under its groups.
    let grey = RGBColor(200, 200, 200);
    let bands = (0..suites.len()).filter_map(|si| {
        let n = noise[si]?;
        let first = groups.iter().position(|g| g.0 == si)? as f64;
        let last = groups.iter().rposition(|g| g.0 == si)? as f64;
        Some(Rectangle::new(
            [(first - 0.5, -n), (last + 0.5, n)],
            grey.mix(0.5).filled(),
        ))
    });
    chart.draw_series(bands)?;
    let palette = [
        RGBColor(66, 133, 244),
        RGBColor(234, 67, 53),
        RGBColor(52, 168, 83),
    ];
    let width = 0.8 / rates.len() as f64;
    for (k, &rate) in rates.iter().enumerate() {
        let color = palette[k % palette.len()];
        let offset = -0.4 + width * (k as f64 + 0.5);
        let bars = values.iter().enumerate().filter_map(|(g, v)| {
            v[k].map(|s| {
                let x = g as f64 + offset;
                Rectangle::new(
                    [(x - width * 0.45, 0.0), (x + width * 0.45, s.median)],
                    color.filled(),
                )
            })
        });
        chart
            .draw_series(bars)?
            .label(rate_label(rate))
            .legend(move |(x, y)| Rectangle::new([(x, y - 5), (x + 12, y + 5)], color.filled()));
        chart.draw_series(values.iter().enumerate().filter_map(|(g, v)| {
            v[k].filter(|s| s.n > 1).map(|s| {
                ErrorBar::new_vertical(
                    g as f64 + offset,
                    s.min,
                    s.median,
                    s.max,
                    BLACK.stroke_width(1),
                    6,
                )
            })
        }))?;
        // The value beyond the whisker's end: above positive bars, below negative ones.
        let gap = (top - bottom) * 0.01;
        chart.draw_series(values.iter().enumerate().filter_map(|(g, v)| {
            v[k].map(|s| {
                let (y, vpos) = if s.median >= 0.0 {
                    (s.max.max(s.median) + gap, VPos::Bottom)
                } else {
                    (s.min.min(s.median) - gap, VPos::Top)
                };
                let style = TextStyle::from(("sans-serif", 11).into_font())
                    .pos(Pos::new(HPos::Center, vpos));
                Text::new(format!("{:+.1}", s.median), (g as f64 + offset, y), style)
            })
        }))?;
    }
    chart.draw_series(std::iter::once(PathElement::new(
        vec![(-0.5, 0.0), (n as f64 - 0.5, 0.0)],
        BLACK,
    )))?;
    chart
        .configure_series_labels()
        .position(SeriesLabelPosition::UpperLeft)
        .background_style(WHITE.mix(0.8))
        .border_style(BLACK)
        .draw()?;
    root.present()?;
    Ok(())
}
