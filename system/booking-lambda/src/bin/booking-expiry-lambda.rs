//! The expiry safety net as a Lambda function (DynamoDB stream of the
//! bookings table; acts only on TTL-service deletions of HELD records).

#[tokio::main]
async fn main() -> Result<(), lambda_runtime::Error> {
    booking_lambda::main_with(|config| async move { booking_lambda::expiry_handler(&config).await })
        .await
}
