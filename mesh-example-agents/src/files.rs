//! `files`: file parts in, file parts out, by bytes and by URI.
//!
//! For every file it receives it answers with a file: a copy by bytes for a file sent by
//! bytes, a reference by URI for a file sent by URI. A `manifest.txt` artifact (by bytes)
//! lists what arrived: name, media type, size or URI.

use mesh_agent::model::{Part, PartContent};
use mesh_agent::{Agent, Outcome, TaskContext, handler_fn, new_artifact};

/// The files agent.
pub fn agent() -> Agent {
    Agent::new(
        "files",
        handler_fn(|ctx: TaskContext| async move {
            let mut manifest = String::new();
            let mut returned = Vec::new();
            for part in &ctx.message().parts {
                let name = part.filename.clone().unwrap_or_else(|| "unnamed".into());
                let media = part
                    .media_type
                    .clone()
                    .unwrap_or_else(|| "application/octet-stream".into());
                match &part.content {
                    PartContent::Raw(bytes) => {
                        manifest.push_str(&format!("{name}\t{media}\t{} bytes\n", bytes.len()));
                        returned.push(
                            Part::raw(bytes.clone())
                                .with_filename(format!("copy-of-{name}"))
                                .with_media_type(media),
                        );
                    }
                    PartContent::Url(url) => {
                        manifest.push_str(&format!("{name}\t{media}\t{url}\n"));
                        returned.push(
                            Part::url(url.clone())
                                .with_filename(name)
                                .with_media_type(media),
                        );
                    }
                    _ => {}
                }
            }
            if returned.is_empty() {
                return Ok(Outcome::input_required(
                    "Attach one or more files (by bytes or by URI) and I will send them back.",
                ));
            }
            ctx.artifact(new_artifact(Some("files".into()), returned))
                .await?;
            ctx.artifact(new_artifact(
                Some("manifest.txt".into()),
                vec![
                    Part::raw(manifest.into_bytes())
                        .with_filename("manifest.txt")
                        .with_media_type("text/plain"),
                ],
            ))
            .await?;
            Ok(Outcome::completed())
        }),
    )
    .description("Sends back the files it receives, with a manifest")
    .skill(
        "files",
        "Files",
        "File parts in, file parts out, by bytes and by URI",
    )
    .modes(&["*/*"], &["*/*"])
}
