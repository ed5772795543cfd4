//! The back-office sync as a Lambda function (DynamoDB stream of the
//! bookings table; upserts every PAID record into PostgreSQL).

#[tokio::main]
async fn main() -> Result<(), lambda_runtime::Error> {
    booking_lambda::main_with(|config| async move { booking_lambda::sync_handler(&config).await })
        .await
}
