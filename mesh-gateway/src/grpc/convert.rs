//! proto ⇄ model conversions (in progress).
