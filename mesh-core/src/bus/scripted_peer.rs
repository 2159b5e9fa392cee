//! For the bus's unit tests: an rumqttc event loop connected over loopback to a scripted
//! peer that accepts the CONNECT, writes the bytes it is given, then only reads.

use rumqttc::{Event, EventLoop, Incoming, MqttOptions};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::sync::mpsc;

/// An event loop (its options as `configure` sets them, client id `test`) connected to a
/// peer that answers the CONNECT with a CONNACK, then writes `then`, then reads: the bytes
/// it receives come out of the returned channel.
pub(crate) async fn connected(
    configure: impl FnOnce(&mut MqttOptions),
    then: &'static [u8],
) -> (EventLoop, mpsc::UnboundedReceiver<Vec<u8>>) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    let (tx, rx) = mpsc::unbounded_channel();
    tokio::spawn(async move {
        let (mut socket, _) = listener.accept().await.unwrap();
        let mut buf = vec![0u8; 64 * 1024];
        let n = socket.read(&mut buf).await.unwrap();
        assert_eq!(buf[0] >> 4, 1, "a CONNECT first ({n} bytes)");
        socket.write_all(&[0x20, 0x02, 0x00, 0x00]).await.unwrap();
        socket.write_all(then).await.unwrap();
        while let Ok(n) = socket.read(&mut buf).await {
            if n == 0 || tx.send(buf[..n].to_vec()).is_err() {
                break;
            }
        }
    });
    let mut options = MqttOptions::new("test", "127.0.0.1", port);
    configure(&mut options);
    let mut eventloop = EventLoop::new(options, 1);
    let first = eventloop.poll().await.unwrap();
    assert!(
        matches!(first, Event::Incoming(Incoming::ConnAck(_))),
        "{first:?}"
    );
    (eventloop, rx)
}
