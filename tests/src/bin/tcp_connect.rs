//! A TCP connect over loopback: listens on 127.0.0.1 (a port the kernel
//! picks), connects to it once, accepts, and exits.

use std::net::{TcpListener, TcpStream};

fn main() -> std::io::Result<()> {
    let listener = TcpListener::bind("127.0.0.1:0")?;
    let addr = listener.local_addr()?;
    let client = TcpStream::connect(addr)?;
    let (server, _) = listener.accept()?;
    drop((client, server));
    Ok(())
}
