//! A mesh seen from the bus, for the tests of agents: a real broker, a namespace of its own, a
//! requester and a registry on it playing the gateway, and helpers to build messages and read
//! reply streams.

use mesh_agent::{Agent, AgentConfig, RunningAgent};
use mesh_core::bus::Bus;
use mesh_core::dialect::Method;
use mesh_core::model::{Message, Part, Role, Task, send_params};
use mesh_core::registry::Registry;
use mesh_core::requester::{Delivery, ReplyStream, Requester, RequesterKind, SendOptions};
use mesh_core::topic::Topics;
use std::time::Duration;

use crate::{TestBroker, WAIT, fresh_namespace};

/// A mesh seen from the bus: a broker, a namespace, and a requester and a registry playing
/// the gateway (no gateway runs).
pub struct BusMesh {
    pub broker: TestBroker,
    pub namespace: String,
    pub bus: Bus,
    pub topics: Topics,
    pub requester: Requester,
    pub registry: Registry,
}

impl BusMesh {
    pub async fn start() -> BusMesh {
        Self::on(TestBroker::mosquitto().await).await
    }

    pub async fn on(broker: TestBroker) -> BusMesh {
        let namespace = fresh_namespace();
        let topics = Topics::new(namespace.clone()).unwrap();
        let bus = Bus::connect(broker.bus_config()).await.unwrap();
        let registry = Registry::start(&bus, &topics, "gw").await.unwrap();
        assert!(registry.wait_loaded(WAIT).await);
        let requester = Requester::start(
            bus.clone(),
            topics.clone(),
            RequesterKind::Gateway,
            "gw",
            "i1",
        )
        .await
        .unwrap();
        requester.watch_registry(&registry);
        BusMesh {
            broker,
            namespace,
            bus,
            topics,
            requester,
            registry,
        }
    }

    pub fn config(&self) -> AgentConfig {
        AgentConfig {
            namespace: self.namespace.clone(),
            heartbeat: Duration::from_secs(1),
            shutdown_grace: Duration::from_millis(500),
            ..AgentConfig::default()
        }
    }

    pub async fn run(&self, agent: Agent) -> RunningAgent {
        let config = self.config();
        self.run_with(agent, config).await
    }

    pub async fn run_with(&self, agent: Agent, config: AgentConfig) -> RunningAgent {
        let running = agent
            .config(config)
            .start(self.broker.bus_config())
            .await
            .expect("agent starts");
        let name = running.name().to_owned();
        assert!(
            self.registry.wait_online(&name, WAIT).await,
            "{name} shows up in the registry"
        );
        running
    }

    /// Sends a user text to `agent` as a new task.
    pub async fn send(&self, agent: &str, text: &str, method: Method) -> (String, ReplyStream) {
        self.send_message(agent, user(text), method, None).await
    }

    /// Streams a task to `agent`, whose handler says it is working (one status with a
    /// message), waits until it does, and cancels it: the task the cancel answered with, and
    /// the rest of the stream.
    pub async fn start_then_cancel(&self, agent: &str) -> (Task, ReplyStream) {
        let (task_id, mut stream) = self.send(agent, "work", Method::SendStreamingMessage).await;
        // The task, then working with the handler's message (which says it is working: the
        // runtime sends no `working` of its own before it).
        for _ in 0..2 {
            stream.next().await.unwrap().reply.unwrap();
        }
        let answer = self
            .requester
            .cancel(agent, &task_id, WAIT)
            .await
            .unwrap()
            .expect("the running instance answers")
            .expect("with the task");
        (answer, stream)
    }

    pub async fn send_message(
        &self,
        agent: &str,
        message: Message,
        method: Method,
        snapshot: Option<Task>,
    ) -> (String, ReplyStream) {
        let task_id = snapshot
            .as_ref()
            .map(|t| t.id.clone())
            .unwrap_or_else(|| uuid::Uuid::now_v7().to_string());
        let stream = self
            .requester
            .send(
                agent,
                send_params(message),
                SendOptions {
                    method,
                    task_id: task_id.clone(),
                    snapshot,
                    timeout: WAIT,
                    principal: None,
                    depth: 0,
                    traceparent: None,
                    keeps_history: false,
                    stream_after_progress: false,
                },
            )
            .await
            .expect("request published");
        (task_id, stream)
    }
}

/// A user message with one text part.
pub fn user(text: &str) -> Message {
    Message::new(Role::User, vec![Part::text(text)])
}

/// Every delivery of a stream, until it ends (bounded by the stream's deadline).
pub async fn collect(mut stream: ReplyStream) -> Vec<Delivery> {
    let mut all = Vec::new();
    while let Some(delivery) = tokio::time::timeout(WAIT, stream.next())
        .await
        .expect("the stream ends in time")
    {
        all.push(delivery);
    }
    all
}
