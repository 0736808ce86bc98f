//! What every chart of the report is drawn with: plotters, as SVG and PNG,
//! with the font bundled in this crate (DejaVu Sans), so that they render the
//! same on a machine without any system font; one colour per algorithm; the
//! grouped bar chart most scenarios use. Each scenario draws its own charts
//! with these (`render!`).

use std::error::Error;
use std::path::{Path, PathBuf};
use std::sync::Once;

use plotters::coord::Shift;
use plotters::prelude::*;
use plotters::style::text_anchor::{HPos, Pos, VPos};

use ratelab::AlgorithmKind;

use crate::CompareError;

/// DejaVu Sans (Bitstream Vera license: `assets/DejaVuSans-LICENSE.txt`).
static FONT: &[u8] = include_bytes!("../assets/DejaVuSans.ttf");
const FAMILY: &str = "sans-serif";

/// Registers the bundled font with plotters, once.
pub fn register_font() {
    static ONCE: Once = Once::new();
    ONCE.call_once(|| {
        // The font is compiled in and valid: a failure is a broken build.
        assert!(
            plotters::style::register_font(FAMILY, FontStyle::Normal, FONT).is_ok(),
            "the bundled DejaVu Sans font is not a valid font"
        );
    });
}

/// What drawing one chart gives.
pub type Drawn = Result<(), Box<dyn Error>>;

/// The algorithms' colours, the same in every chart, taken in the order of
/// [`AlgorithmKind::ALL`]: Okabe–Ito's (safe for colour-blind readers, never
/// black, the colour of the axes and limits), then Tol's for algorithms
/// added later. An algorithm joins the charts with its row; more rows than
/// colours do not compile.
const PALETTE: [RGBColor; 10] = [
    RGBColor(213, 94, 0),
    RGBColor(0, 114, 178),
    RGBColor(86, 180, 233),
    RGBColor(0, 158, 115),
    RGBColor(204, 121, 167),
    RGBColor(230, 159, 0),
    RGBColor(90, 90, 90),
    RGBColor(136, 34, 85),
    RGBColor(153, 153, 51),
    RGBColor(68, 170, 153),
];

const _: () = assert!(
    AlgorithmKind::ALL.len() <= PALETTE.len(),
    "more algorithms than colours: add colours to PALETTE in crates/compare/src/charts.rs"
);

/// What a name no algorithm has is drawn in (a peer's): a light grey no
/// algorithm has.
const UNLISTED: RGBColor = RGBColor(170, 170, 170);

/// The colour of the algorithm named `name` in every chart.
pub fn color(name: &str) -> RGBColor {
    AlgorithmKind::ALL
        .iter()
        .position(|kind| kind.name() == name)
        .map_or(UNLISTED, |row| PALETTE[row])
}

/// The label of `kind` in every chart and table: its own name.
pub fn label(kind: AlgorithmKind) -> &'static str {
    kind.name()
}

/// Series colours for the grouped bars: the correct variant, the flawed
/// one, and a third.
pub const GOOD: RGBColor = RGBColor(0, 114, 178);
pub const BAD: RGBColor = RGBColor(213, 94, 0);
pub const THIRD: RGBColor = RGBColor(0, 158, 115);
pub const LIMIT: RGBColor = RGBColor(200, 0, 0);
pub const OFFERED: RGBColor = RGBColor(160, 160, 160);

/// The bundled font at `size`, in black.
pub fn font(size: f64) -> TextStyle<'static> {
    (FAMILY, size).into_font().color(&BLACK)
}

/// One series of a grouped bar chart.
#[derive(Debug)]
pub struct Bars<'a> {
    /// The legend.
    pub label: &'a str,
    /// The bars' colour.
    pub color: RGBColor,
    /// One value per algorithm; `None` draws nothing.
    pub values: Vec<Option<f64>>,
    /// Optional (low, high) whisker per algorithm.
    pub whiskers: Vec<Option<(f64, f64)>>,
}

/// A grouped bar chart with one group per algorithm, in
/// [`AlgorithmKind::ALL`] order.
pub fn grouped_bars<DB: DrawingBackend>(
    area: &DrawingArea<DB, Shift>,
    title: &str,
    y_desc: &str,
    series: &[Bars<'_>],
    limit: Option<(f64, String)>,
    decimals: usize,
) -> Drawn
where
    DB::ErrorType: 'static,
{
    let top = series
        .iter()
        .flat_map(|s| {
            s.values
                .iter()
                .flatten()
                .copied()
                .chain(s.whiskers.iter().flatten().map(|w| w.1))
        })
        .chain(limit.iter().map(|l| l.0))
        .fold(0.0f64, f64::max);
    // Headroom for the legend, one line per series and the limit.
    let entries = series.len() + usize::from(limit.is_some());
    let y_max = if top > 0.0 {
        top * (1.1 + 0.08 * entries as f64)
    } else {
        1.0
    };
    let n = AlgorithmKind::ALL.len();
    let mut chart = ChartBuilder::on(area)
        .caption(title, font(22.0))
        .margin(12)
        .x_label_area_size(40)
        .y_label_area_size(70)
        .build_cartesian_2d(-0.5f64..n as f64 - 0.5, 0f64..y_max)?;
    chart
        .configure_mesh()
        .disable_x_mesh()
        .x_labels(0)
        .y_label_formatter(&|v| num_label(*v))
        .y_label_style(font(14.0))
        .y_desc(y_desc)
        .axis_desc_style(font(15.0))
        .draw()?;
    // The algorithms' names under their groups (plotters' own labels fall
    // on round numbers, not on the groups).
    let base = area.get_base_pixel();
    for (i, kind) in AlgorithmKind::ALL.into_iter().enumerate() {
        let (x, y) = chart.backend_coord(&(i as f64, 0.0));
        area.draw(&Text::new(
            label(kind).to_owned(),
            (x - base.0, y - base.1 + 10),
            font(14.0).pos(Pos::new(HPos::Center, VPos::Top)),
        ))?;
    }
    let groups = series.len().max(1) as f64;
    let width = 0.8 / groups;
    for (k, s) in series.iter().enumerate() {
        let offset = -0.4 + width * k as f64;
        let color = s.color;
        // A zero is a thin stub, so that it reads as measured, not missing.
        let stub = y_max * 0.008;
        let rects = s.values.iter().enumerate().filter_map(|(i, v)| {
            v.map(|v| {
                let x0 = i as f64 + offset + 0.02;
                let top = if v == 0.0 { stub } else { v };
                Rectangle::new([(x0, 0.0), (x0 + width - 0.04, top)], color.filled())
            })
        });
        chart
            .draw_series(rects)?
            .label(s.label)
            .legend(move |(x, y)| Rectangle::new([(x, y - 6), (x + 14, y + 6)], color.filled()));
        let labels = s.values.iter().enumerate().filter_map(|(i, v)| {
            v.map(|v| {
                let x = i as f64 + offset + width / 2.0;
                Text::new(
                    format!("{v:.decimals$}"),
                    (x, v),
                    font(13.0).pos(Pos::new(HPos::Center, VPos::Bottom)),
                )
            })
        });
        chart.draw_series(labels)?;
        for (i, w) in s.whiskers.iter().enumerate() {
            if let Some((low, high)) = *w {
                let x = i as f64 + offset + width / 2.0;
                let style = BLACK.stroke_width(2);
                chart.draw_series(std::iter::once(PathElement::new(
                    vec![(x, low), (x, high)],
                    style,
                )))?;
                for y in [low, high] {
                    chart.draw_series(std::iter::once(PathElement::new(
                        vec![(x - width / 5.0, y), (x + width / 5.0, y)],
                        style,
                    )))?;
                }
            }
        }
    }
    if let Some((value, label)) = limit {
        chart
            .draw_series(DashedLineSeries::new(
                vec![(-0.5, value), (n as f64 - 0.5, value)],
                10,
                6,
                LIMIT.stroke_width(2),
            ))?
            .label(label)
            .legend(|(x, y)| PathElement::new(vec![(x, y), (x + 14, y)], LIMIT.stroke_width(2)));
    }
    chart
        .configure_series_labels()
        .position(SeriesLabelPosition::UpperRight)
        .label_font(font(14.0))
        .background_style(WHITE.mix(0.9))
        .border_style(BLACK)
        .draw()?;
    Ok(())
}

/// An axis label: no decimals on round values.
pub fn num_label(v: f64) -> String {
    if (v - v.round()).abs() < 1e-9 {
        format!("{v:.0}")
    } else {
        let s = format!("{v:.2}");
        s.trim_end_matches('0').to_owned()
    }
}

/// A note in an empty panel.
pub fn note<DB: DrawingBackend>(area: &DrawingArea<DB, Shift>, title: &str, text: &str) -> Drawn
where
    DB::ErrorType: 'static,
{
    let (w, h) = area.dim_in_pixel();
    let w = i32::try_from(w).unwrap_or(i32::MAX);
    let h = i32::try_from(h).unwrap_or(i32::MAX);
    area.draw(&Text::new(
        title.to_owned(),
        (w / 2, 20),
        font(22.0).pos(Pos::new(HPos::Center, VPos::Top)),
    ))?;
    area.draw(&Text::new(
        text.to_owned(),
        (w / 2, h / 2),
        font(16.0).pos(Pos::new(HPos::Center, VPos::Center)),
    ))?;
    Ok(())
}

/// No bar whiskers, one per algorithm.
pub fn no_whiskers() -> Vec<Option<(f64, f64)>> {
    vec![None; AlgorithmKind::ALL.len()]
}

/// Where the charts go, and which were drawn.
#[derive(Debug)]
pub struct Canvas {
    /// The charts folder.
    pub dir: PathBuf,
    /// The names drawn so far.
    pub drawn: Vec<String>,
}

impl Canvas {
    /// A canvas on `dir` (created), with the font registered.
    pub fn new(dir: &Path) -> Result<Self, CompareError> {
        register_font();
        std::fs::create_dir_all(dir).map_err(|source| CompareError::Write {
            path: dir.to_owned(),
            source,
        })?;
        Ok(Canvas {
            dir: dir.to_owned(),
            drawn: Vec::new(),
        })
    }

    /// The error of a chart that failed to draw.
    pub fn fail(name: &str, e: &dyn Error) -> CompareError {
        CompareError::Chart {
            name: name.to_owned(),
            message: e.to_string(),
        }
    }
}

/// Writes an RGB buffer of `size` pixels as a PNG file: plotters draws the
/// bitmap, the `png` crate encodes it (plotters' own encoder brings the whole
/// `image` crate into the build for this one call).
pub fn write_png(path: &Path, size: (u32, u32), rgb: &[u8]) -> Result<(), Box<dyn Error>> {
    let file = std::io::BufWriter::new(std::fs::File::create(path)?);
    let mut encoder = png::Encoder::new(file, size.0, size.1);
    encoder.set_color(png::ColorType::Rgb);
    encoder.set_depth(png::BitDepth::Eight);
    // Flat colours and straight lines: per-row adaptive filters and the best
    // compression keep a chart a few hundred kB in the repository.
    encoder.set_adaptive_filter(png::AdaptiveFilterType::Adaptive);
    encoder.set_compression(png::Compression::Best);
    let mut writer = encoder.write_header()?;
    writer.write_image_data(rgb)?;
    writer.finish()?;
    Ok(())
}

/// Draws `$body` (on a drawing area named `$root`, any backend) into
/// `$canvas` as `$name.svg` and `$name.png`, of `$size` pixels. A macro, not
/// a function: the body is drawn once per backend type.
macro_rules! render {
    ($canvas:expr, $name:expr, $size:expr, |$root:ident| $body:expr) => {{
        use plotters::prelude::{BitMapBackend, IntoDrawingArea, SVGBackend, WHITE};
        let canvas: &mut $crate::charts::Canvas = $canvas;
        let name: &str = $name;
        let fail = |e: Box<dyn std::error::Error>| $crate::charts::Canvas::fail(name, &*e);
        let svg = canvas.dir.join(format!("{name}.svg"));
        {
            let $root = SVGBackend::new(&svg, $size).into_drawing_area();
            $root.fill(&WHITE).map_err(|e| fail(e.into()))?;
            $body.map_err(fail)?;
            $root.present().map_err(|e| fail(e.into()))?;
        }
        let png = canvas.dir.join(format!("{name}.png"));
        let size: (u32, u32) = $size;
        let mut rgb = vec![0u8; size.0 as usize * size.1 as usize * 3];
        {
            let $root = BitMapBackend::with_buffer(&mut rgb, size).into_drawing_area();
            $root.fill(&WHITE).map_err(|e| fail(e.into()))?;
            $body.map_err(fail)?;
            $root.present().map_err(|e| fail(e.into()))?;
        }
        $crate::charts::write_png(&png, size, &rgb).map_err(|e| fail(e.into()))?;
        canvas.drawn.push(name.to_owned());
    }};
}
pub(crate) use render;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_algorithm_has_a_colour_of_its_own_and_its_label() {
        for (row, colour) in PALETTE.iter().enumerate() {
            assert_ne!(*colour, BLACK, "colour {row} is black, the axes' colour");
            assert_ne!(*colour, UNLISTED, "colour {row} is the unlisted's");
            assert!(!PALETTE[..row].contains(colour), "colour {row} twice");
        }
        for (row, kind) in AlgorithmKind::ALL.into_iter().enumerate() {
            assert_eq!(color(kind.name()), PALETTE[row]);
            assert!(!label(kind).is_empty(), "{kind} has no label");
        }
        assert_eq!(color("redis-cell"), UNLISTED);
    }
}
