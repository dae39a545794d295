//! Test-only: a loopback AWS service speaking the AWS JSON 1.1 protocol (the operation named
//! in the `X-Amz-Target` header, `<prefix><Operation>`; Smithy, "AWS JSON 1.1 protocol"), for
//! the answers and error branches no emulator produces (an endpoint held `Creating`, a log
//! page that is empty with more behind it).

use std::sync::{Arc, Mutex};

use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};

/// Serves on a free loopback port until the test ends. The `n`th call (from 1) of an operation
/// is answered `answer(operation, n)`: an HTTP status and a JSON body. `prefix` is the
/// service's target prefix, left out of the operation names (`SageMaker.`,
/// `Logs_20140328.`). Returns the endpoint URL and the operations called, in order.
pub async fn json_service(
    prefix: &'static str,
    answer: impl Fn(&str, usize) -> (u16, String) + Send + 'static,
) -> (String, Arc<Mutex<Vec<String>>>) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    let calls = Arc::new(Mutex::new(Vec::<String>::new()));
    let seen = Arc::clone(&calls);
    tokio::spawn(async move {
        while let Ok((mut socket, _)) = listener.accept().await {
            let head = read_request(&mut socket).await;
            let operation = header(&head, "x-amz-target")
                .map(|t| t.trim_start_matches(prefix).to_string())
                .unwrap_or_default();
            let n = {
                let mut calls = seen.lock().unwrap();
                calls.push(operation.clone());
                calls.iter().filter(|c| **c == operation).count()
            };
            let (status, body) = answer(&operation, n);
            let response = format!(
                "HTTP/1.1 {status} X\r\ncontent-type: application/x-amz-json-1.1\r\n\
                 content-length: {}\r\nconnection: close\r\n\r\n{body}",
                body.len()
            );
            let _ = socket.write_all(response.as_bytes()).await;
        }
    });
    (url, calls)
}

/// Reads one request: its headers, then as much body as they announce. Returns the headers.
async fn read_request(socket: &mut tokio::net::TcpStream) -> String {
    let mut request = Vec::new();
    let mut buf = [0u8; 4096];
    let (head, length) = loop {
        let n = socket.read(&mut buf).await.unwrap_or(0);
        request.extend_from_slice(&buf[..n]);
        let text = String::from_utf8_lossy(&request).to_string();
        if let Some(end) = text.find("\r\n\r\n") {
            let head = text[..end].to_string();
            let length = header(&head, "content-length")
                .and_then(|v| v.parse::<usize>().ok())
                .unwrap_or(0);
            break (head, end + 4 + length);
        }
        if n == 0 {
            break (text, 0);
        }
    };
    while request.len() < length {
        let n = socket.read(&mut buf).await.unwrap_or(0);
        if n == 0 {
            break;
        }
        request.extend_from_slice(&buf[..n]);
    }
    head
}

/// The value of header `name` (any case) in `head`.
fn header<'a>(head: &'a str, name: &str) -> Option<&'a str> {
    head.lines().find_map(|l| {
        let (k, v) = l.split_once(':')?;
        k.eq_ignore_ascii_case(name).then(|| v.trim())
    })
}
