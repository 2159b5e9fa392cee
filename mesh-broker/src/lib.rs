//! # mesh-broker
//!
//! An MQTT broker that runs inside the process: the default broker of `mesh up` and the
//! broker each test starts for itself on an ephemeral port.
