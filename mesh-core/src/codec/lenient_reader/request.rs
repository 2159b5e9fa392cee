//! The lenient reading of a JSON-RPC request (or batch) of any dialect: the envelope, the
//! method resolved to its dialect, then the params by [`super::params`]. This is the
//! definition of what a request may look like and of every error a bad one gets; the typed
//! reader ([`crate::codec::typed_reader`]) answers either nothing or the same.

use serde_json::Value;

use super::params;
use crate::codec::Decoded;
use crate::dialect::resolve_method;
use crate::error::A2aError;
use crate::jsonrpc::{Incoming, parse_envelope, parse_incoming};
use crate::meta::MeshMeta;
use crate::rpc::{Call, Request, RequestError};

/// Decodes a payload that may be a batch (see [`crate::codec::decode`]).
pub(crate) fn decode(bytes: &[u8]) -> Decoded {
    match parse_incoming(bytes) {
        Err(e) => Decoded::Single(Err(RequestError {
            id: e.id,
            notification: false,
            dialect: None,
            method: None,
            shared_method: false,
            error: e.error,
        })),
        Ok(Incoming::Single(v)) => Decoded::Single(decode_value(v)),
        Ok(Incoming::Batch(items)) => Decoded::Batch(items.into_iter().map(decode_value).collect()),
    }
}

/// Decodes one request object (a single request or a batch element).
fn decode_value(value: Value) -> Result<Request, RequestError> {
    let env = parse_envelope(value).map_err(|e| {
        let info = e.method.as_deref().and_then(resolve_method);
        RequestError {
            id: e.id,
            notification: false,
            dialect: info.map(|i| i.dialect),
            method: info.map(|i| i.method),
            shared_method: info.is_some_and(|i| i.shared),
            error: e.error,
        }
    })?;
    let notification = env.id.is_none();
    let Some(info) = resolve_method(&env.method) else {
        return Err(RequestError {
            id: env.id,
            notification,
            dialect: None,
            method: None,
            shared_method: false,
            error: A2aError::method_not_found(&env.method),
        });
    };
    match params::read_call(info.method, info.dialect, env.params).and_then(|mut call| {
        let mesh = take_mesh(&mut call)?;
        Ok((call, mesh))
    }) {
        Ok((call, mesh)) => Ok(Request {
            id: env.id,
            method: info.method,
            dialect: info.dialect,
            shared_method: info.shared,
            mesh,
            call,
        }),
        Err(error) => Err(RequestError {
            id: env.id,
            notification,
            dialect: Some(info.dialect),
            method: Some(info.method),
            shared_method: info.shared,
            error,
        }),
    }
}

/// The request's envelope, lifted out of its params' metadata, with the task snapshot of a
/// follow-up read as a task (`null` as none; `-32602` naming it when it is not one).
fn take_mesh(call: &mut Call) -> Result<MeshMeta, A2aError> {
    let mut mesh = call.take_mesh();
    if let Some(snapshot) = mesh.other.remove("task").filter(|v| !v.is_null()) {
        let task = super::read_task(snapshot, "params.metadata._mesh.task")?;
        mesh.task = Some(Box::new(task));
    }
    Ok(mesh)
}
