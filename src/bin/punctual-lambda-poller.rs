//! The poller Lambda function (cargo feature `lambda`): see `punctual::lambda::poller` and docs/DEPLOY.md.

#[tokio::main]
async fn main() -> Result<(), lambda_runtime::Error> {
    punctual::lambda::poller::main().await
}
