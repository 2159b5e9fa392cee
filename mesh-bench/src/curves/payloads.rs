//! Curve 4, payloads: one gateway and one echo agent; for each size, sequential
//! `message/send` of one text part of that many bytes, then of one file part of that many
//! bytes (base64 in the request, as JSON carries them), echoed back as an artifact: the
//! p50, the throughput (bytes sent per second of round trips), and the gateway's peak RSS
//! so far. A size past the gateway's request limit shows what the client gets instead.

use std::time::{Duration, Instant};

use serde_json::{Value, json};

use super::chart::{Line, Panel};
use super::{Curve, Mesh, Row, Scale, Setup, call, mib, send_body};
use crate::fleet::Kind;
use crate::report::dur;
use crate::stats::Latencies;

const KIB: u64 = 1024;
const SIZES: [u64; 6] = [KIB, 16 * KIB, 256 * KIB, 1024 * KIB, 2048 * KIB, 8192 * KIB];

#[derive(Debug, Clone, Copy)]
enum Shape {
    Text,
    File,
}

/// One size's figures, or what the client got instead.
type Point = Result<(Latencies, f64, u64), String>;

pub async fn run(setup: &Setup, scale: Scale) -> Curve {
    let mut curve = Curve::new(
        "Payloads",
        "payloads",
        "bytes",
        &[
            "text: p50",
            "text: MB/s",
            "file: p50",
            "file: MB/s",
            "gateway peak RSS",
        ],
    );
    let mesh = match setup.mesh().await {
        Ok(mesh) => mesh,
        Err(e) => return curve.failed(e),
    };
    let echo = async {
        let echo = setup.fleet(&mesh, Kind::Echo, "echo", 1, 16).await?;
        super::wait_all_listed(&setup.http, &mesh.base, "echo", 1, Duration::from_secs(30)).await?;
        Ok::<_, String>(echo)
    };
    let _echo = match echo.await {
        Ok(echo) => echo,
        Err(e) => return curve.failed(e),
    };
    let sizes = match scale {
        Scale::Full => SIZES.to_vec(),
        Scale::Quick => SIZES[..4].to_vec(),
    };
    let mut text_line = Vec::new();
    let mut file_line = Vec::new();
    let mut peak_line = Vec::new();
    for size in sizes {
        let text = point(setup, &mesh, Shape::Text, size).await;
        let file = point(setup, &mesh, Shape::File, size).await;
        let peak = mesh.gateway.peak_rss_kib().unwrap_or(0);
        let mut cells = Vec::new();
        for (figure, line) in [(&text, &mut text_line), (&file, &mut file_line)] {
            match figure {
                Ok((latencies, per_second, _)) => {
                    cells.push(dur(latencies.percentile(50.0)));
                    cells.push(format!("{:.1}", per_second / 1e6));
                    line.push((size as f64, *per_second / 1e6));
                }
                Err(why) => {
                    cells.push(format!("refused: {why}"));
                    cells.push("-".into());
                }
            }
        }
        cells.push(mib(peak));
        peak_line.push((size as f64, peak as f64 / 1024.0));
        curve.rows.push(Row { x: size, cells });
    }
    curve.panels = vec![
        Panel::new(
            "MB/s",
            vec![Line::new("text", text_line), Line::new("file", file_line)],
        ),
        Panel::new("MiB", vec![Line::new("gateway peak RSS", peak_line)]),
    ];
    curve.notes.push(
        "Sizes are of the part's content (a file's bytes before base64). The gateway takes \
         request bodies up to 4 MiB (and never more than its bus connection carries)."
            .to_owned(),
    );
    curve.notes.push(match copies(setup, &mesh).await {
        Ok(table) => table,
        Err(e) => format!("copies: not counted: {e}"),
    });
    curve
}

/// The copies of a payload through a gateway and the product's echo agent, counted by
/// `mesh-copies` (next to this executable) on the curve's broker: its table as printed.
async fn copies(setup: &Setup, mesh: &Mesh) -> Result<String, String> {
    let program = setup.mesh.with_file_name("mesh-copies");
    let run = tokio::process::Command::new(&program)
        .args(["--broker-url", &mesh.broker.url()])
        .args(["--bytes", "16384", "--bytes", "1048576", "--requests", "5"])
        .kill_on_drop(true)
        .output();
    let output = tokio::time::timeout(Duration::from_secs(120), run)
        .await
        .map_err(|_| "mesh-copies took over 120 s".to_owned())?
        .map_err(|e| format!("cannot run {}: {e}", program.display()))?;
    if !output.status.success() {
        return Err(String::from_utf8_lossy(&output.stderr).trim().to_owned());
    }
    Ok(String::from_utf8_lossy(&output.stdout).trim().to_owned())
}

async fn point(setup: &Setup, mesh: &Mesh, shape: Shape, size: u64) -> Point {
    let part = match shape {
        Shape::Text => json!({"kind": "text", "text": "x".repeat(size as usize)}),
        // "abc" is "YWJj" in base64: the bytes need no encoder.
        Shape::File => json!({"kind": "file", "file": {"name": "blob.bin",
            "mimeType": "application/octet-stream",
            "bytes": "YWJj".repeat(size.div_ceil(3) as usize)}}),
    };
    let samples = match size {
        s if s <= 256 * KIB => 50,
        s if s <= 2048 * KIB => 10,
        _ => 3,
    };
    let body = send_body(0, json!([part]), None);
    let mut latencies = Latencies::default();
    let began = Instant::now();
    for _ in 0..samples {
        let sent = Instant::now();
        let answer: Value = call(&setup.http, &mesh.base, "echo", &body).await?;
        if answer["result"]["status"]["state"] != "completed" {
            let error = answer["error"].to_string();
            return Err(error.chars().take(160).collect());
        }
        latencies.push(sent.elapsed());
    }
    let per_second = (size * samples) as f64 / began.elapsed().as_secs_f64();
    Ok((latencies, per_second, size))
}
