//! Payload copies: how many times a message's payload is copied or re-encoded on its way
//! through the gateway and an agent, counted by the allocator rather than by reading code.
//!
//! `mesh-copies` (its binary) runs a gateway (memory store) and the example `echo` agent in
//! its own process, each on a thread and runtime of its own, against a broker given by URL,
//! with [`CountingAllocator`] as the global allocator. Every allocation (and reallocation) of
//! at least the payload's size is counted against the part whose thread made it: a buffer
//! that large holds one whole copy of the payload (the JSON text of a request or a reply,
//! the decoded string, the base64 text, the decoded bytes, a packet on its way to the
//! socket), so the count per request is the number of copies of the payload that part made.
//! With `--where`, the first request's large allocations are listed with the frames of the
//! code that made them.

use std::alloc::{GlobalAlloc, Layout, System};
use std::backtrace::Backtrace;
use std::cell::Cell;
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};

/// The parts of the mesh whose allocations are counted; everything else (the load generator)
/// is `Other` and not counted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
pub enum Part {
    Other = 0,
    Gateway = 1,
    Agent = 2,
}

impl Part {
    pub const COUNTED: [Part; 2] = [Part::Gateway, Part::Agent];

    pub fn label(self) -> &'static str {
        match self {
            Part::Other => "other",
            Part::Gateway => "gateway",
            Part::Agent => "agent",
        }
    }

    fn from_u8(value: u8) -> Part {
        match value {
            1 => Part::Gateway,
            2 => Part::Agent,
            _ => Part::Other,
        }
    }
}

thread_local! {
    /// The part this thread works for (set once, when a part's thread starts).
    static PART: Cell<u8> = const { Cell::new(0) };
    /// True while this thread records a backtrace: what that allocates is not counted.
    static TRACING: Cell<bool> = const { Cell::new(false) };
}

/// Marks the calling thread as working for `part` (a runtime's `on_thread_start`).
pub fn set_part(part: Part) {
    PART.with(|p| p.set(part as u8));
}

/// Allocations of at least this many bytes are counted (`usize::MAX`: none).
static THRESHOLD: AtomicUsize = AtomicUsize::new(usize::MAX);
/// Per part: how many large allocations, and their bytes.
static COUNTS: [AtomicU64; 3] = [const { AtomicU64::new(0) }; 3];
static BYTES: [AtomicU64; 3] = [const { AtomicU64::new(0) }; 3];
/// Whether large allocations are traced (their backtraces kept), and the traces.
static TRACE: AtomicBool = AtomicBool::new(false);
static TRACES: Mutex<Vec<(Part, usize, Backtrace)>> = Mutex::new(Vec::new());

/// The system allocator, counting the large allocations of each part.
pub struct CountingAllocator;

impl CountingAllocator {
    #[inline]
    fn note(size: usize) {
        if size < THRESHOLD.load(Ordering::Relaxed) {
            return;
        }
        let part = PART.with(Cell::get);
        if part == 0 || TRACING.with(Cell::get) {
            return;
        }
        COUNTS[part as usize].fetch_add(1, Ordering::Relaxed);
        BYTES[part as usize].fetch_add(size as u64, Ordering::Relaxed);
        if TRACE.load(Ordering::Relaxed) {
            TRACING.with(|t| t.set(true));
            let trace = Backtrace::force_capture();
            if let Ok(mut traces) = TRACES.lock() {
                traces.push((Part::from_u8(part), size, trace));
            }
            TRACING.with(|t| t.set(false));
        }
    }
}

// SAFETY: every call is passed to the system allocator unchanged; counting only reads and
// writes atomics and const-initialised thread-locals (no allocation, except a backtrace's,
// which the `TRACING` flag keeps from recursing).
unsafe impl GlobalAlloc for CountingAllocator {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        Self::note(layout.size());
        unsafe { System.alloc(layout) }
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        Self::note(layout.size());
        unsafe { System.alloc_zeroed(layout) }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        if new_size > layout.size() {
            Self::note(new_size);
        }
        unsafe { System.realloc(ptr, layout, new_size) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        unsafe { System.dealloc(ptr, layout) }
    }
}

/// What one part allocated in a measured run.
#[derive(Debug, Clone, Copy, Default)]
pub struct Tally {
    pub allocations: u64,
    pub bytes: u64,
}

/// Counts the large allocations (at least `threshold` bytes) made while `work` runs, per
/// part; with `trace`, keeps their backtraces for [`take_traces`].
pub async fn count<F: std::future::Future>(
    threshold: usize,
    trace: bool,
    work: F,
) -> (F::Output, [Tally; 2]) {
    for part in Part::COUNTED {
        COUNTS[part as usize].store(0, Ordering::SeqCst);
        BYTES[part as usize].store(0, Ordering::SeqCst);
    }
    TRACE.store(trace, Ordering::SeqCst);
    THRESHOLD.store(threshold, Ordering::SeqCst);
    let output = work.await;
    THRESHOLD.store(usize::MAX, Ordering::SeqCst);
    TRACE.store(false, Ordering::SeqCst);
    let tally = Part::COUNTED.map(|part| Tally {
        allocations: COUNTS[part as usize].load(Ordering::SeqCst),
        bytes: BYTES[part as usize].load(Ordering::SeqCst),
    });
    (output, tally)
}

/// The traces kept by the last traced [`count`], each as its part, its size and the frames
/// of the code that made it (the allocator's and the standard library's own left out).
pub fn take_traces() -> Vec<(Part, usize, Vec<String>)> {
    let traces = std::mem::take(&mut *TRACES.lock().unwrap_or_else(|e| e.into_inner()));
    traces
        .into_iter()
        .map(|(part, size, trace)| (part, size, frames(&trace)))
        .collect()
}

/// The frames of a backtrace worth reading, each as `function (file:line)`: the first
/// outside the allocator and the standard library (what grew or made the buffer), then those
/// of the mesh's own crates, at most six in all.
///
/// The release profile keeps line tables only, so a frame inlined by LTO (most of them) is
/// named by its bare function name (`decode`, not `mesh_core::codec::decode`): each frame is
/// judged by its source file too. The files are shown from the crate's folder on
/// (`mesh-core/src/codec/mod.rs:96:11`, `serde_json-1.0.154/src/de.rs:…`,
/// `library/alloc/src/vec/mod.rs:…`).
fn frames(trace: &Backtrace) -> Vec<String> {
    frames_of(&trace.to_string())
}

/// [`frames`] of a backtrace's text.
fn frames_of(text: &str) -> Vec<String> {
    const NOT_THE_CALLER: [&str; 9] = [
        "std::",
        "core::",
        "alloc::",
        "mesh_bench::copies",
        "__rust",
        "__rustc::",
        "hashbrown::",
        "bytes::bytes_mut::BytesMut::reserve",
        "<unknown>",
    ];
    // Source files of the same: the standard library, this allocator, and the crates whose
    // growth functions only pass the allocation on.
    const NOT_THE_CALLER_FILES: [&str; 4] = [
        "library/",
        "mesh-bench/src/copies.rs",
        "hashbrown-",
        "bytes-1",
    ];
    let mut frames = Vec::new();
    let mut first_found = false;
    let mut lines = text.lines().peekable();
    while let Some(line) = lines.next() {
        let Some((_, function)) = line.trim_start().split_once(": ") else {
            continue;
        };
        let at = match lines.peek() {
            Some(next) if next.trim_start().starts_with("at ") => {
                let at = short_path(next.trim_start().trim_start_matches("at "));
                lines.next();
                at
            }
            _ => "",
        };
        let function = strip_hash(function);
        let bare = function.trim_start_matches('<');
        let ours = bare.starts_with("mesh_") || at.starts_with("mesh-");
        if !first_found {
            if NOT_THE_CALLER.iter().any(|s| bare.starts_with(s))
                || NOT_THE_CALLER_FILES.iter().any(|f| at.starts_with(f))
            {
                continue;
            }
            first_found = true;
        } else if !ours {
            continue;
        }
        frames.push(if at.is_empty() {
            function.to_owned()
        } else {
            format!("{function} ({at})")
        });
        if frames.len() == 6 {
            break;
        }
    }
    frames
}

/// A frame's source file from its crate's folder on: `mesh-core/src/…` for the workspace's
/// crates (`./mesh-core/src/…` or an absolute path), `serde_json-1.0.154/src/…` for a
/// registry crate, `library/alloc/src/…` for the standard library.
fn short_path(at: &str) -> &str {
    if let Some((_, rest)) = at.split_once("/rustc/") {
        return rest.split_once('/').map_or(rest, |(_, path)| path);
    }
    if let Some((_, rest)) = at.split_once("/registry/src/") {
        return rest.split_once('/').map_or(rest, |(_, path)| path);
    }
    match at.find("/mesh-") {
        Some(i) => &at[i + 1..],
        None => at.trim_start_matches("./"),
    }
}

/// A symbol without its trailing `::h0123…` hash.
fn strip_hash(function: &str) -> &str {
    match function.rsplit_once("::h") {
        Some((head, hash)) if hash.len() == 16 && hash.bytes().all(|b| b.is_ascii_hexdigit()) => {
            head
        }
        _ => function,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hashes_are_stripped_and_other_names_kept() {
        assert_eq!(
            strip_hash("serde_json::ser::to_vec::h0123456789abcdef"),
            "serde_json::ser::to_vec"
        );
        assert_eq!(strip_hash("mesh_core::codec::h"), "mesh_core::codec::h");
    }

    #[test]
    fn inlined_frames_with_bare_names_are_judged_by_their_files() {
        // As std prints a backtrace of the release build (line tables only, fat LTO).
        let trace = "   0: std::backtrace::Backtrace::force_capture
             at /rustc/59807616e1fa2540724bfbac14d7976d7e4a3860/library/std/src/backtrace.rs:312:9
   1: note
             at ./mesh-bench/src/copies.rs:88:25
   2: alloc
             at ./mesh-bench/src/copies.rs:103:9
   3: reserve
             at /rustc/59807616e1fa2540724bfbac14d7976d7e4a3860/library/alloc/src/raw_vec/mod.rs:560:9
   4: parse_str
             at /root/.cargo/registry/src/index.crates.io-1949cf8c6b5b557f/serde_json-1.0.154/src/read.rs:250:13
   5: deserialize_string<serde_json::read::StrRead>
             at /root/.cargo/registry/src/index.crates.io-1949cf8c6b5b557f/serde_json-1.0.154/src/de.rs:1600:5
   6: decode_request
             at ./mesh-core/src/codec/typed_reader.rs:836:35
   7: mesh_gateway::jsonrpc::handle::{{closure}}
             at /work/main/mesh-gateway/src/jsonrpc.rs:165:28
   8: tokio::runtime::task::raw::poll
             at /root/.cargo/registry/src/index.crates.io-1949cf8c6b5b557f/tokio-1.54.1/src/runtime/task/raw.rs:255:5
";
        assert_eq!(
            frames_of(trace),
            [
                "parse_str (serde_json-1.0.154/src/read.rs:250:13)",
                "decode_request (mesh-core/src/codec/typed_reader.rs:836:35)",
                "mesh_gateway::jsonrpc::handle::{{closure}} (mesh-gateway/src/jsonrpc.rs:165:28)",
            ]
        );
    }
}
