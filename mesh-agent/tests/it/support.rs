//! What the runtime's tests share: the bus-side mesh of mesh-testkit (a broker, a namespace, a
//! requester and a registry playing the gateway) and its helpers.

pub use mesh_testkit::WAIT;
pub use mesh_testkit::bus_mesh::*;
