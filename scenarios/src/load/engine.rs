//! The load's users: what each goose transaction does (take an arrival,
//! book, retry, pay), and the [`Engine`] state they share. Goose itself is
//! configured and run in [`super::attack`]. See the module docs of
//! [`crate::load`] for the design.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::time::Duration;

use goose::goose::{GooseRequest, GooseUser};
use goose::metrics::GooseRequestMetric;
use goose::prelude::TransactionResult;
use parking_lot::Mutex;
use serde::Serialize;
use tokio::sync::watch;
use tokio::time::Instant;

use super::balancer::{self, Balancer};
use super::outcome::{self, ActionAnswer, BookingAnswer};
use super::queue::{Due, DueQueue};
use super::stats::{self, LiveStats, Recorder};
use super::{Arrival, LoadProfile, PayerKind, PaymentTally, Phase};

/// An arrival not started this long after the schedule's last intended
/// start is dropped.
pub const DROP_GRACE: Duration = Duration::from_secs(5);
/// How long goose may take to finish (write its reports) after `stop_by`
/// before the engine stops waiting for it.
pub const EXECUTE_GRACE: Duration = Duration::from_secs(10);
/// One request's time limit.
pub const REQUEST_TIMEOUT: Duration = Duration::from_secs(10);
/// Goose's report files, written into `out_dir`.
pub const GOOSE_REPORTS: [&str; 3] = ["goose-report.html", "goose-report.json", "goose-report.md"];
/// From the last goose user's start to the schedule's zero.
pub(super) const START_LEAD: Duration = Duration::from_millis(50);
/// The schedule starts after this even if not every user has started.
pub(super) const START_WAIT_MAX: Duration = Duration::from_secs(10);
/// Users started per second: all of them within about 50 ms.
pub(super) const RAMP_S: f64 = 0.05;
/// After every user has reported itself finished, how long a user waits
/// before its transaction returns, so goose's next look at its shutdown
/// channel (at least twice a second) comes first and its `Exit` is seen
/// without another transaction.
const EXIT_LINGER: Duration = Duration::from_millis(700);

/// A payment handed from a booking to a payer.
#[derive(Debug, Clone)]
pub(super) struct PayJob {
    kind: PayerKind,
    checkout_url: String,
}

/// What each goose user keeps between its transactions.
#[derive(Debug, Clone, Default)]
pub(super) struct Session {
    /// This user's number (0-based, in start order), for the recorder shard.
    number: usize,
    /// Whether it has told goose it is finished.
    announced: bool,
    /// The arrival taken by `arrival`, for `booking`: its index and
    /// intended start.
    arrival: Option<(usize, Instant)>,
    /// The payment taken by `payer waits`, for `pay`.
    pay: Option<Due<PayJob>>,
    /// The retry taken by `retry waits`, for `retry`: the arrival's index.
    retry: Option<Due<usize>>,
}

fn session(user: &mut GooseUser) -> &mut Session {
    if user.get_session_data::<Session>().is_none() {
        user.set_session_data(Session::default());
    }
    user.get_session_data_unchecked_mut::<Session>()
}

/// An answer, read in full.
#[derive(Debug)]
struct Answer {
    status: Option<u16>,
    location: Option<String>,
    retry_after: Option<String>,
    body: Vec<u8>,
    metric: Option<GooseRequestMetric>,
    /// The request failed to connect, or its connection dropped before an
    /// answer; or the instance refused it because it is leaving (`503
    /// draining`, [`balancer::is_draining`]): to a load balancer, both mean
    /// the instance is gone and the request goes to another.
    connection_error: bool,
}

impl Answer {
    fn none() -> Answer {
        Answer {
            status: None,
            location: None,
            retry_after: None,
            body: Vec::new(),
            metric: None,
            connection_error: false,
        }
    }
}

#[derive(Serialize)]
struct BookingBody<'a> {
    candidate: &'a str,
    level: &'a str,
}

/// Everything the users share.
#[derive(Debug)]
pub(super) struct Engine {
    pub(super) arrivals: Vec<Arrival>,
    /// The arrivals' candidate tokens (`candidate_auth`), signed ahead.
    pub(super) tokens: Option<crate::candidate_tokens::CandidateTokens>,
    /// `{booking_url}/bookings` per instance.
    pub(super) booking_endpoints: Vec<String>,
    /// The instances as a load balancer sees them.
    pub(super) balancer: Arc<Balancer>,
    pub(super) profile: LoadProfile,
    pub(super) client: goose_reqwest::Client,
    pub(super) live: Arc<LiveStats>,
    /// When [`run`] was called.
    pub(super) called: Instant,
    /// The hard bound.
    pub(super) stop_at: Instant,
    /// Set once: the schedule's zero.
    pub(super) zero: watch::Sender<Option<Instant>>,
    /// The zero is never before this ([`super::LoadConfig::start_at`]).
    pub(super) not_before: Option<Instant>,
    /// The next arrival to take.
    pub(super) next: AtomicUsize,
    /// Arrivals not yet finished plus payments and retries queued or running.
    pub(super) outstanding: AtomicUsize,
    /// True when the work is done or the bound has passed.
    pub(super) done: watch::Sender<bool>,
    pub(super) stopped: AtomicBool,
    pub(super) total_users: usize,
    pub(super) ready: AtomicUsize,
    pub(super) announced: AtomicUsize,
    pub(super) all_announced: watch::Sender<bool>,
    pub(super) payers: DueQueue<PayJob>,
    pub(super) retries: DueQueue<usize>,
    pub(super) booking: Recorder,
    pub(super) retry: Recorder,
    pub(super) checkout: Recorder,
    pub(super) callback: Recorder,
    pub(super) started: AtomicU64,
    pub(super) late: AtomicU64,
    pub(super) rush_started: AtomicU64,
    /// ns since `called`.
    pub(super) rush_first_ns: AtomicU64,
    pub(super) rush_last_ns: AtomicU64,
    pub(super) outcomes: Mutex<BTreeMap<String, u64>>,
    pub(super) retry_outcomes: Mutex<BTreeMap<String, u64>>,
    pub(super) payments: Mutex<PaymentTally>,
}

fn count(map: &Mutex<BTreeMap<String, u64>>, key: &str) {
    let mut map = map.lock();
    match map.get_mut(key) {
        Some(n) => *n += 1,
        None => {
            map.insert(key.to_owned(), 1);
        }
    }
}

fn ns(d: Duration) -> u64 {
    u64::try_from(d.as_nanos()).unwrap_or(u64::MAX)
}

impl Engine {
    /// One piece of work is finished; the last one ends the load.
    fn finish_one(&self) {
        if self.outstanding.fetch_sub(1, Ordering::AcqRel) == 1 {
            self.done.send_replace(true);
        }
    }

    fn is_done(&self) -> bool {
        *self.done.borrow()
    }

    /// Whether the hard bound has passed (the bound task may not have run
    /// yet at the very instant).
    fn past_bound(&self) -> bool {
        self.stopped.load(Ordering::Acquire) || Instant::now() >= self.stop_at
    }

    /// Waits until the work is done or the bound passes.
    async fn wait_done(&self) {
        let mut done = self.done.subscribe();
        let _ = tokio::time::timeout_at(self.stop_at, done.wait_for(|d| *d)).await;
    }

    /// This user is finished: tell goose (once), wait for the others, then
    /// linger so goose's `Exit` arrives before the next transaction.
    async fn finished(&self, user: &mut GooseUser) {
        let s = session(user);
        if !s.announced {
            s.announced = true;
            if let Some(shutdown) = &user.shutdown_channel {
                let _ = shutdown.send(user.weighted_users_index);
            }
            if self.announced.fetch_add(1, Ordering::AcqRel) + 1 >= self.total_users {
                self.all_announced.send_replace(true);
            }
        }
        let mut all = self.all_announced.subscribe();
        let _ = tokio::time::timeout_at(self.stop_at + EXECUTE_GRACE, all.wait_for(|a| *a)).await;
        tokio::time::sleep(EXIT_LINGER).await;
    }

    /// Sends one request through goose, bounded by the hard stop, and reads
    /// the whole answer.
    async fn send(
        &self,
        user: &mut GooseUser,
        name: &'static str,
        request: goose_reqwest::RequestBuilder,
        expect: Option<u16>,
    ) -> Answer {
        let sent = std::time::Instant::now();
        self.live.request_sent();
        let mut builder = GooseRequest::builder()
            .name(name)
            .set_request_builder(request);
        if let Some(code) = expect {
            builder = builder.expect_status_code(code);
        }
        let answer =
            match tokio::time::timeout_at(self.stop_at, user.request(builder.build())).await {
                Ok(Ok(goose)) => match goose.response {
                    Ok(response) => {
                        let header = |h: &str| {
                            response
                                .headers()
                                .get(h)
                                .and_then(|v| v.to_str().ok())
                                .map(str::to_owned)
                        };
                        let status = response.status().as_u16();
                        let location = header("location");
                        let retry_after = header("retry-after");
                        match tokio::time::timeout_at(self.stop_at, response.bytes()).await {
                            Ok(Ok(body)) => Answer {
                                connection_error: balancer::is_draining(status, &body),
                                status: Some(status),
                                location,
                                retry_after,
                                body: body.to_vec(),
                                metric: Some(goose.request),
                            },
                            // the body cut short: the connection dropped
                            Ok(Err(e)) => Answer {
                                metric: Some(goose.request),
                                connection_error: balancer::is_connection_error(&e),
                                ..Answer::none()
                            },
                            Err(_) => Answer {
                                metric: Some(goose.request),
                                ..Answer::none()
                            },
                        }
                    }
                    Err(e) => Answer {
                        metric: Some(goose.request),
                        connection_error: balancer::is_connection_error(&e),
                        ..Answer::none()
                    },
                },
                Ok(Err(e)) => {
                    tracing::debug!(error = %e, request = name, "goose refused the request");
                    Answer::none()
                }
                Err(_) => Answer::none(),
            };
        if answer.connection_error {
            self.live.request_failed_to_connect();
        } else {
            self.live.request_done(answer.status, sent);
        }
        answer
    }

    /// Sends a request to the booking instance `url` is on, as through a
    /// load balancer: to the next live instance if that one is marked down,
    /// and again to the next live one after a connection error (which marks
    /// its instance down). A URL on no instance is sent as it is.
    async fn send_to_fleet(
        &self,
        user: &mut GooseUser,
        name: &'static str,
        url: &str,
        build: impl Fn(&goose_reqwest::Client, &str) -> goose_reqwest::RequestBuilder,
        expect: Option<u16>,
    ) -> Answer {
        let Some(home) = self.balancer.instance_of(url) else {
            let request = build(&user.client, url);
            return self.send(user, name, request, expect).await;
        };
        let n = self.balancer.bases().len();
        let mut tried = vec![false; n];
        let mut last: Option<Answer> = None;
        loop {
            let next = (0..n)
                .map(|k| (home + k) % n)
                .find(|i| !tried[*i] && !self.balancer.is_down(*i));
            let Some(i) = next else {
                break;
            };
            tried[i] = true;
            let target = self.balancer.rebase(url, home, i);
            let request = build(&user.client, &target);
            let answer = self.send(user, name, request, expect).await;
            if !answer.connection_error {
                return answer;
            }
            if self.balancer.mark_down(i) {
                tracing::info!(
                    instance = i,
                    request = name,
                    status = answer.status,
                    "connection error or draining: instance marked down"
                );
            }
            last = Some(answer);
        }
        // every instance down: a load balancer would refuse at once
        last.unwrap_or_else(|| {
            self.live.connection_error();
            Answer {
                connection_error: true,
                ..Answer::none()
            }
        })
    }

    /// Marks an answer as designed a success in goose's tables (goose
    /// counts only 2xx, or the one expected status, as successes).
    fn as_designed(user: &mut GooseUser, answer: &mut Answer, designed: bool) {
        if let Some(metric) = answer.metric.as_mut()
            && designed
            && !metric.success
        {
            let _ = user.set_success(metric);
        }
    }

    /// `arrival`: the next arrival, waited for until its intended start.
    pub(super) async fn take_arrival(self: Arc<Engine>, user: &mut GooseUser) -> TransactionResult {
        if session(user).announced {
            self.finished(user).await;
            return Ok(());
        }
        let zero = {
            let mut zero = self.zero.subscribe();
            match tokio::time::timeout_at(self.stop_at, zero.wait_for(|z| z.is_some())).await {
                Ok(Ok(z)) => *z,
                _ => None,
            }
        };
        let Some(zero) = zero else {
            self.wait_done().await;
            self.finished(user).await;
            return Ok(());
        };
        let drop_after = zero + self.arrivals.last().map(|a| a.at).unwrap_or_default() + DROP_GRACE;
        loop {
            let index = self.next.fetch_add(1, Ordering::AcqRel);
            let Some(arrival) = self.arrivals.get(index) else {
                self.wait_done().await;
                self.finished(user).await;
                return Ok(());
            };
            let intended = zero + arrival.at;
            let now = Instant::now();
            if self.past_bound() || now > drop_after || intended >= self.stop_at {
                self.finish_one(); // dropped: never started
                continue;
            }
            if intended > now
                && tokio::time::timeout_at(self.stop_at, tokio::time::sleep_until(intended))
                    .await
                    .is_err()
            {
                self.finish_one();
                continue;
            }
            session(user).arrival = Some((index, intended));
            return Ok(());
        }
    }

    /// `booking`: sends the arrival's booking.
    pub(super) async fn book(self: Arc<Engine>, user: &mut GooseUser) -> TransactionResult {
        let Some((index, intended)) = session(user).arrival.take() else {
            return Ok(());
        };
        if self.past_bound() {
            self.finish_one(); // dropped: never started
            return Ok(());
        }
        let shard = session(user).number;
        let arrival = &self.arrivals[index];
        let started = Instant::now();
        self.started.fetch_add(1, Ordering::Relaxed);
        self.live.arrivals_started.fetch_add(1, Ordering::Relaxed);
        if stats::is_late(
            started.saturating_duration_since(intended),
            self.profile.lateness_allowance_ms,
        ) {
            self.late.fetch_add(1, Ordering::Relaxed);
        }
        if arrival.phase == Phase::Rush {
            let at = ns(started.saturating_duration_since(self.called));
            self.rush_started.fetch_add(1, Ordering::Relaxed);
            self.rush_first_ns.fetch_min(at, Ordering::Relaxed);
            self.rush_last_ns.fetch_max(at, Ordering::Relaxed);
        }
        let endpoint = &self.booking_endpoints[index % self.booking_endpoints.len()];
        let answer = self.post_booking(user, "booking", endpoint, index).await;
        let latency = Instant::now().saturating_duration_since(intended);
        self.booking.record(shard, latency, !answer.expected());
        self.live.record_booking(latency);
        count(&self.outcomes, answer.key());
        self.follow_up(&answer, arrival, Some(index));
        self.finish_one();
        Ok(())
    }

    /// Sends a booking and classifies the answer.
    async fn post_booking(
        &self,
        user: &mut GooseUser,
        name: &'static str,
        endpoint: &str,
        index: usize,
    ) -> BookingAnswer {
        let arrival = &self.arrivals[index];
        let body = serde_json::to_vec(&BookingBody {
            candidate: &arrival.candidate,
            level: &arrival.level,
        })
        .unwrap_or_default();
        // signed candidates: the candidate's token, as the login gave it
        let authorization = self
            .tokens
            .as_ref()
            .map(|t| format!("Bearer {}", t.token(index, &arrival.candidate)));
        let build = |client: &goose_reqwest::Client, url: &str| {
            let request = client
                .post(url)
                .header("content-type", "application/json")
                .body(body.clone());
            match &authorization {
                Some(a) => request.header("authorization", a.as_str()),
                None => request,
            }
        };
        let mut answer = self.send_to_fleet(user, name, endpoint, build, None).await;
        let classified =
            outcome::classify_booking(answer.status, &answer.body, answer.retry_after.as_deref());
        Engine::as_designed(user, &mut answer, classified.expected());
        match &classified {
            BookingAnswer::Admitted { .. } => {
                self.live.bookings_ok.fetch_add(1, Ordering::Relaxed);
            }
            BookingAnswer::Refused(code) | BookingAnswer::Busy { code, .. } => {
                self.live.refuse(code);
            }
            BookingAnswer::Holding | BookingAnswer::Transport => {}
        }
        classified
    }

    /// Hands a hold to the payers, or a busy booking to the retries
    /// (`retry_of`: the arrival, when this was its first attempt).
    fn follow_up(&self, answer: &BookingAnswer, arrival: &Arrival, retry_of: Option<usize>) {
        let now = Instant::now();
        match answer {
            BookingAnswer::Admitted {
                redirect_url: Some(url),
            } => {
                let due = if outcome::plan(arrival.payer).late {
                    now + self.profile.pay_late_after
                } else {
                    now
                };
                self.outstanding.fetch_add(1, Ordering::AcqRel);
                self.payers.push(
                    due,
                    PayJob {
                        kind: arrival.payer,
                        checkout_url: url.clone(),
                    },
                );
            }
            _ => {
                if let (Some(wait), Some(index)) = (answer.retry_after(), retry_of)
                    && arrival.retry_if_busy
                {
                    self.outstanding.fetch_add(1, Ordering::AcqRel);
                    self.retries.push(now + wait, index);
                }
            }
        }
    }

    /// Waits for the next item of `queue`, or for the end.
    async fn next_item<T: Send>(&self, queue: &DueQueue<T>) -> Option<Due<T>> {
        if self.is_done() || self.past_bound() {
            return None;
        }
        let mut done = self.done.subscribe();
        tokio::select! {
            biased;
            _ = done.wait_for(|d| *d) => None,
            item = queue.take() => item,
        }
    }

    /// `payer waits`: the next payment due.
    pub(super) async fn take_payment(self: Arc<Engine>, user: &mut GooseUser) -> TransactionResult {
        if !session(user).announced
            && let Some(item) = self.next_item(&self.payers).await
        {
            session(user).pay = Some(item);
            return Ok(());
        }
        self.finished(user).await;
        Ok(())
    }

    /// `retry waits`: the next retry due.
    pub(super) async fn take_retry(self: Arc<Engine>, user: &mut GooseUser) -> TransactionResult {
        if !session(user).announced
            && let Some(item) = self.next_item(&self.retries).await
        {
            session(user).retry = Some(item);
            return Ok(());
        }
        self.finished(user).await;
        Ok(())
    }

    /// `retry`: books again, once.
    pub(super) async fn retry_booking(
        self: Arc<Engine>,
        user: &mut GooseUser,
    ) -> TransactionResult {
        let Some(item) = session(user).retry.take() else {
            return Ok(());
        };
        if self.past_bound() {
            count(&self.retry_outcomes, "not_run");
            self.finish_one();
            return Ok(());
        }
        let shard = session(user).number;
        let index = item.item;
        let arrival = &self.arrivals[index];
        let endpoint = &self.booking_endpoints[(index + 1) % self.booking_endpoints.len()];
        let answer = self.post_booking(user, "retry", endpoint, index).await;
        let latency = Instant::now().saturating_duration_since(item.due);
        self.retry.record(shard, latency, !answer.expected());
        count(&self.retry_outcomes, answer.key());
        self.follow_up(&answer, arrival, None);
        self.finish_one();
        Ok(())
    }

    /// `pay`: what the payer does on the checkout page, then the redirects.
    pub(super) async fn pay(self: Arc<Engine>, user: &mut GooseUser) -> TransactionResult {
        let Some(item) = session(user).pay.take() else {
            return Ok(());
        };
        if self.past_bound() {
            self.payments.lock().not_run += 1;
            self.finish_one();
            return Ok(());
        }
        let shard = session(user).number;
        let job = item.item;
        let plan = outcome::plan(job.kind);
        let mut failed = false;
        for _ in 0..plan.opens {
            let request = user.client.get(&job.checkout_url);
            let answer = self.send(user, "checkout page", request, Some(200)).await;
            failed |= !outcome::answered_as_designed(answer.status);
        }
        let mut redirects = Vec::new();
        let mut actions = Vec::new();
        for action in plan.actions {
            let request = user
                .client
                .post(&job.checkout_url)
                .header("content-type", "application/x-www-form-urlencoded")
                .body(format!("action={action}"));
            let mut answer = self.send(user, "checkout action", request, Some(302)).await;
            let designed = outcome::answered_as_designed(answer.status);
            failed |= !designed;
            Engine::as_designed(user, &mut answer, designed);
            let classified = outcome::classify_action(answer.status, answer.location.as_deref());
            actions.push(classified.key());
            if let ActionAnswer::Redirect(url) = classified {
                redirects.push(url);
            }
        }
        self.checkout.record(
            shard,
            Instant::now().saturating_duration_since(item.due),
            failed,
        );
        let mut delivered = Vec::new();
        for url in redirects {
            let target = match plan.forge_status {
                Some(status) => mock_gateway::payer::with_status(&url, status),
                None => url,
            };
            for _ in 0..plan.deliveries {
                let sent = Instant::now();
                let mut answer = self
                    .send_to_fleet(user, "callback", target.as_str(), |c, u| c.get(u), None)
                    .await;
                let designed = outcome::answered_as_designed(answer.status);
                Engine::as_designed(user, &mut answer, designed);
                self.callback.record(
                    shard,
                    Instant::now().saturating_duration_since(sent),
                    !designed,
                );
                if answer.status == Some(200) {
                    self.live
                        .paid_redirects_delivered
                        .fetch_add(1, Ordering::Relaxed);
                }
                delivered.push(outcome::callback_answer(answer.status));
            }
        }
        // a payer who approved at once, well within the hold (a late payer
        // may come back after it, and is rightly told so)
        let approved = plan.actions.contains(&"pay") && !plan.late;
        {
            let mut tally = self.payments.lock();
            *tally
                .by_kind
                .entry(job.kind.as_str().to_owned())
                .or_default() += 1;
            for key in actions {
                if key == "transport_error" {
                    tally.transport_errors += 1;
                }
                *tally.actions.entry(key).or_default() += 1;
            }
            for key in delivered {
                tally.redirects_delivered += 1;
                if plan.forge_status.is_some() {
                    tally.forged_delivered += 1;
                }
                if key == "transport_error" {
                    tally.transport_errors += 1;
                }
                if approved && key == "not_paid" {
                    tally.approved_told_not_paid += 1;
                }
                *tally.callback_answers.entry(key).or_default() += 1;
            }
        }
        self.finish_one();
        Ok(())
    }

    /// The schedule's zero if it were `at`: never before
    /// [`Engine::not_before`].
    pub(super) fn zero_from(&self, at: Instant) -> Instant {
        self.not_before.map_or(at, |n| n.max(at))
    }

    /// `start` (each user's first transaction): its number and the shared
    /// client; the last user to start sets the schedule's zero.
    pub(super) async fn start(self: Arc<Engine>, user: &mut GooseUser) -> TransactionResult {
        let number = self.ready.fetch_add(1, Ordering::AcqRel);
        session(user).number = number;
        user.client = self.client.clone();
        if number + 1 == self.total_users {
            let zero = self.zero_from(Instant::now() + START_LEAD);
            self.zero.send_if_modified(|z| {
                if z.is_none() {
                    *z = Some(zero);
                    true
                } else {
                    false
                }
            });
        }
        Ok(())
    }
}
