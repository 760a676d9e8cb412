//! `sluice-mock [ADDR]`: the mock provider as a process, for the SDK script and the load harness.
//! Prints `listening on http://ADDR` once ready, then serves until killed.

fn main() {
    let addr = std::env::args()
        .nth(1)
        .unwrap_or_else(|| "127.0.0.1:0".into());
    let addr = match addr.parse() {
        Ok(addr) => addr,
        Err(err) => {
            eprintln!("sluice-mock: bad address {addr}: {err}");
            std::process::exit(2);
        }
    };
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("tokio runtime");
    runtime.block_on(async {
        let mock = integration_tests::mock::Mock::start_on(addr).await;
        println!("listening on {}", mock.url());
        std::future::pending::<()>().await;
    });
}
