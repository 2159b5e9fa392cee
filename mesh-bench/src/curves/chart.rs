//! A curve's chart: one SVG of side-by-side panels, each a set of lines over a logarithmic
//! x axis (the counts go by decades), drawn by plotters' SVG backend.

use std::path::Path;

use plotters::prelude::*;

/// One panel: its y axis and the lines on it.
#[derive(Debug, Clone)]
pub struct Panel {
    pub y_label: String,
    pub lines: Vec<Line>,
}

/// One line: its legend and its points (x, y).
#[derive(Debug, Clone)]
pub struct Line {
    pub name: String,
    pub points: Vec<(f64, f64)>,
}

impl Panel {
    /// A panel of `lines` over `y_label`.
    pub fn new(y_label: &str, lines: Vec<Line>) -> Panel {
        Panel {
            y_label: y_label.to_owned(),
            lines,
        }
    }
}

impl Line {
    /// A line named `name`.
    pub fn new(name: &str, points: Vec<(f64, f64)>) -> Line {
        Line {
            name: name.to_owned(),
            points,
        }
    }
}

/// Panel size in pixels.
const PANEL_WIDTH: u32 = 420;
const PANEL_HEIGHT: u32 = 300;

/// Draws `panels` side by side into `path`, titled `title`.
pub fn draw(title: &str, x_label: &str, panels: &[Panel], path: &Path) -> Result<(), String> {
    let width = PANEL_WIDTH * panels.len().max(1) as u32;
    let root = SVGBackend::new(path, (width, PANEL_HEIGHT + 40)).into_drawing_area();
    root.fill(&WHITE).map_err(|e| e.to_string())?;
    let root = root
        .titled(title, ("sans-serif", 18))
        .map_err(|e| e.to_string())?;
    let areas = root.split_evenly((1, panels.len().max(1)));
    for (panel, area) in panels.iter().zip(areas) {
        draw_panel(panel, x_label, &area)?;
    }
    root.present().map_err(|e| e.to_string())
}

fn draw_panel(
    panel: &Panel,
    x_label: &str,
    area: &DrawingArea<SVGBackend<'_>, plotters::coord::Shift>,
) -> Result<(), String> {
    let points = || panel.lines.iter().flat_map(|l| l.points.iter());
    let x_max = points().map(|p| p.0).fold(1.0_f64, f64::max) * 1.5;
    let y_max = points().map(|p| p.1).fold(0.0_f64, f64::max).max(1e-9) * 1.15;
    let mut chart = ChartBuilder::on(area)
        .margin(12)
        .x_label_area_size(36)
        .y_label_area_size(56)
        .build_cartesian_2d((0.8_f64..x_max).log_scale(), 0.0_f64..y_max)
        .map_err(|e| e.to_string())?;
    chart
        .configure_mesh()
        .x_desc(x_label)
        .y_desc(panel.y_label.as_str())
        .x_label_formatter(&|x| format!("{x:.0}"))
        .y_label_formatter(&|y| short(*y))
        .draw()
        .map_err(|e| e.to_string())?;
    for (index, line) in panel.lines.iter().enumerate() {
        let color = Palette99::pick(index).to_rgba();
        chart
            .draw_series(LineSeries::new(
                line.points.iter().copied(),
                color.stroke_width(2),
            ))
            .map_err(|e| e.to_string())?
            .label(line.name.as_str())
            .legend(move |(x, y)| PathElement::new([(x, y), (x + 16, y)], color.stroke_width(2)));
        chart
            .draw_series(
                line.points
                    .iter()
                    .map(|&p| Circle::new(p, 3, color.filled())),
            )
            .map_err(|e| e.to_string())?;
    }
    chart
        .configure_series_labels()
        .position(SeriesLabelPosition::UpperLeft)
        .background_style(WHITE.mix(0.8))
        .border_style(BLACK.mix(0.3))
        .draw()
        .map_err(|e| e.to_string())
}

/// An axis figure without trailing zeros.
fn short(y: f64) -> String {
    if y >= 100.0 || y == 0.0 {
        format!("{y:.0}")
    } else if y >= 1.0 {
        format!("{y:.1}")
    } else {
        format!("{y:.2}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_chart_is_an_svg_with_its_labels_as_text() {
        let dir = std::env::temp_dir().join(format!("mesh-chart-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("chart.svg");
        let panels = [
            Panel::new(
                "ms",
                vec![Line::new(
                    "p50",
                    vec![(1.0, 0.5), (10.0, 0.7), (100.0, 2.0)],
                )],
            ),
            Panel::new(
                "MiB",
                vec![Line::new("gateway", vec![(1.0, 9.0), (100.0, 12.0)])],
            ),
        ];
        draw("A curve", "agents", &panels, &path).unwrap();
        let svg = std::fs::read_to_string(&path).unwrap();
        assert!(svg.starts_with("<svg"), "{}", &svg[..svg.len().min(200)]);
        for label in ["A curve", "agents", "p50", "gateway", "MiB"] {
            assert!(svg.contains(label), "{label} is missing from the chart");
        }
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
