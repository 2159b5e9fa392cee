//! A2aError → tonic::Status (in progress).
