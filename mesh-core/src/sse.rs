//! Server-sent events as a client of the gateway reads them (the CLI, the benchmarks, the
//! tests): `id:` and `data:` fields, an event ending at a blank line (`\n` or `\r\n`),
//! `data:` lines of one event joined, comments (keep-alives) and events without data skipped.
//! Pure: bytes in, events out; the caller reads its HTTP body and feeds it.

/// One event of a stream: its `id` (when it had a number there) and its `data:` lines joined.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SseEvent {
    /// The event's id.
    pub id: Option<u64>,
    /// Its data.
    pub data: String,
}

impl SseEvent {
    /// The data as JSON (`Null` when it is not).
    pub fn json(&self) -> serde_json::Value {
        serde_json::from_str(&self.data).unwrap_or(serde_json::Value::Null)
    }
}

/// An SSE parser: feed it the stream's bytes as they come, read its events.
#[derive(Debug, Default)]
pub struct SseParser {
    line: Vec<u8>,
    id: Option<u64>,
    data: Option<String>,
    events: Vec<SseEvent>,
}

impl SseParser {
    /// Reads `bytes` (any split of the stream); the events they end are added.
    pub fn feed(&mut self, bytes: &[u8]) {
        for &b in bytes {
            if b == b'\n' {
                let line = std::mem::take(&mut self.line);
                self.line_done(&line);
            } else {
                self.line.push(b);
            }
        }
    }

    fn line_done(&mut self, line: &[u8]) {
        let line = String::from_utf8_lossy(line);
        let line = line.strip_suffix('\r').unwrap_or(&line);
        if line.is_empty() {
            self.dispatch();
        } else if let Some(value) = field(line, "data") {
            let data = self.data.get_or_insert_with(String::new);
            if !data.is_empty() {
                data.push('\n');
            }
            data.push_str(value);
        } else if let Some(value) = field(line, "id") {
            self.id = value.trim().parse().ok();
        }
    }

    /// The events read so far.
    pub fn events(&self) -> &[SseEvent] {
        &self.events
    }

    /// The events read, taken out.
    pub fn take_events(&mut self) -> Vec<SseEvent> {
        std::mem::take(&mut self.events)
    }

    /// Every event read.
    pub fn into_events(self) -> Vec<SseEvent> {
        self.events
    }

    /// Ends the event being read, if it has data (comments and bare ids are not events).
    fn dispatch(&mut self) {
        if let Some(data) = self.data.take() {
            self.events.push(SseEvent {
                id: self.id.take(),
                data,
            });
        }
        self.id = None;
    }

    /// The stream ended: the last event, when it was not ended by a blank line, is added.
    pub fn finish(&mut self) {
        if !self.line.is_empty() {
            let line = std::mem::take(&mut self.line);
            self.line_done(&line);
        }
        self.dispatch();
    }
}

/// The value of `line` when it is field `name` (`name:value`, one leading space dropped).
fn field<'a>(line: &'a str, name: &str) -> Option<&'a str> {
    let value = line.strip_prefix(name)?.strip_prefix(':')?;
    Some(value.strip_prefix(' ').unwrap_or(value))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn events_are_split_at_blank_lines_with_their_ids() {
        let mut p = SseParser::default();
        p.feed(b"data: {\"a\":1}\nid: 1\n\n: keep-alive\n\ndata: x\r\n");
        p.feed(b"data: y\r\nid:2\r\n\r\ndata: z\n");
        p.finish();
        assert_eq!(
            p.events,
            vec![
                SseEvent {
                    id: Some(1),
                    data: "{\"a\":1}".into()
                },
                SseEvent {
                    id: Some(2),
                    data: "x\ny".into()
                },
                SseEvent {
                    id: None,
                    data: "z".into()
                },
            ]
        );
    }
}
