//! `flight-booker`: a multi-turn agent, as in the A2A docs' flight booking example.
//!
//! The first message gets `input-required` and a question; a follow-up on the same task that
//! names two airport codes (three capital letters each) and a date completes the task with a
//! `FlightItinerary.json` data artifact. A follow-up that still lacks them asks again.

use mesh_agent::model::{Part, Role};
use mesh_agent::serde_json::json;
use mesh_agent::{Agent, Outcome, TaskContext, handler_fn, new_artifact};

/// The flight-booker agent.
pub fn agent() -> Agent {
    Agent::new(
        "flight-booker",
        handler_fn(|ctx: TaskContext| async move {
            // Everything the user said in this task so far, this message included.
            let said: Vec<String> = ctx
                .task()
                .history
                .iter()
                .flatten()
                .filter(|m| m.role == Role::User)
                .flat_map(|m| m.parts.iter().filter_map(|p| p.as_text().map(str::to_owned)))
                .collect();
            let said = said.join(" ");
            let airports = airport_codes(&said);
            let date = travel_date(&said);
            let (Some((from, to)), Some(date)) = (airports, date) else {
                return Ok(Outcome::input_required(
                    "Sure, I can help with that! Where would you like to fly from and to \
                     (airport codes, e.g. JFK to LHR), and on which date (YYYY-MM-DD)?",
                ));
            };
            ctx.working(format!("searching flights {from} → {to} on {date}"))
                .await?;
            let confirmation: String = ctx
                .task_id()
                .chars()
                .rev()
                .filter(char::is_ascii_alphanumeric)
                .take(6)
                .collect::<String>()
                .to_uppercase();
            let itinerary = json!({
                "confirmationId": confirmation,
                "from": from,
                "to": to,
                "departure": format!("{date}T18:00:00Z"),
            });
            ctx.artifact(new_artifact(
                Some("FlightItinerary.json".into()),
                vec![Part::data(itinerary).with_media_type("application/json")],
            ))
            .await?;
            Ok(Outcome::completed_with(format!(
                "Booked: {from} to {to} on {date}, confirmation {confirmation}. Details are in the artifact."
            )))
        }),
    )
    .description("Books flights; asks for what it needs to know first")
    .skill("book-flight", "Book a flight", "Multi-turn: asks for route and date, then books")
    .modes(&["text/plain"], &["text/plain", "application/json"])
}

/// The first two three-letter upper-case words: origin and destination.
fn airport_codes(text: &str) -> Option<(String, String)> {
    let mut codes = text
        .split(|c: char| !c.is_ascii_alphanumeric())
        .filter(|w| w.len() == 3 && w.chars().all(|c| c.is_ascii_uppercase()));
    Some((codes.next()?.to_owned(), codes.next()?.to_owned()))
}

/// The first `YYYY-MM-DD` in the text.
fn travel_date(text: &str) -> Option<String> {
    text.split(|c: char| c.is_whitespace() || c == ',')
        .map(|w| w.trim_matches(|c: char| !c.is_ascii_digit()))
        .find(|w| {
            let b = w.as_bytes();
            b.len() == 10
                && b[4] == b'-'
                && b[7] == b'-'
                && w.chars().filter(char::is_ascii_digit).count() == 8
        })
        .map(str::to_owned)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_route_and_date() {
        assert_eq!(
            airport_codes("from JFK to LHR"),
            Some(("JFK".into(), "LHR".into()))
        );
        assert_eq!(airport_codes("I'd like to book a flight."), None);
        assert_eq!(
            travel_date("on 2026-10-10, please"),
            Some("2026-10-10".into())
        );
        assert_eq!(travel_date("October 10th"), None);
    }
}
