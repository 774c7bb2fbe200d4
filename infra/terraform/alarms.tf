# Alarms: letters waiting for an operator, workers not keeping up, tasks firing late, and a
# poller that fails. Notifications go to var.alarm_actions.

resource "aws_cloudwatch_metric_alarm" "dlq_depth" {
  alarm_name          = "${var.prefix}dlq-depth"
  alarm_description   = "Dead letters are waiting in ${local.dlq}: see /v1/dlq or the console."
  namespace           = "AWS/SQS"
  metric_name         = "ApproximateNumberOfMessagesVisible"
  dimensions          = { QueueName = aws_sqs_queue.dlq.name }
  statistic           = "Maximum"
  period              = 300
  evaluation_periods  = 1
  comparison_operator = "GreaterThanThreshold"
  threshold           = var.dlq_depth_threshold
  treat_missing_data  = "notBreaching"
  alarm_actions       = var.alarm_actions
  ok_actions          = var.alarm_actions
  tags                = var.tags
}

resource "aws_cloudwatch_metric_alarm" "oldest_message_age" {
  alarm_name          = "${var.prefix}ready-oldest-message-age"
  alarm_description   = "The oldest message in ${local.ready_queue} is old: workers are not keeping up (raise worker_max_concurrency) or failing."
  namespace           = "AWS/SQS"
  metric_name         = "ApproximateAgeOfOldestMessage"
  dimensions          = { QueueName = aws_sqs_queue.ready.name }
  statistic           = "Maximum"
  period              = 60
  evaluation_periods  = 5
  comparison_operator = "GreaterThanThreshold"
  threshold           = var.oldest_message_age_threshold_seconds
  treat_missing_data  = "notBreaching"
  alarm_actions       = var.alarm_actions
  ok_actions          = var.alarm_actions
  tags                = var.tags
}

# Dispatch lag as the user sees it: claim time minus due time of every fired task. The worker
# function logs it in CloudWatch Embedded Metric Format (namespace punctual, metric FireLagMs,
# dimension Prefix; src/lambda/worker.rs), so it costs no API call.
resource "aws_cloudwatch_metric_alarm" "fire_lag" {
  alarm_name          = "${var.prefix}fire-lag-p99"
  alarm_description   = "Tasks fire late (p99 of claim time minus due time): pollers or workers are behind."
  namespace           = "punctual"
  metric_name         = "FireLagMs"
  dimensions          = { Prefix = var.prefix }
  extended_statistic  = "p99"
  period              = 300
  evaluation_periods  = 1
  comparison_operator = "GreaterThanThreshold"
  threshold           = var.fire_lag_threshold_ms
  treat_missing_data  = "notBreaching"
  alarm_actions       = var.alarm_actions
  ok_actions          = var.alarm_actions
  tags                = var.tags
}

# Without pollers nothing fires: alarm on failing poller invocations.
resource "aws_cloudwatch_metric_alarm" "poller_errors" {
  alarm_name          = "${var.prefix}poller-errors"
  alarm_description   = "Poller invocations fail: tasks are not being dispatched."
  namespace           = "AWS/Lambda"
  metric_name         = "Errors"
  dimensions          = { FunctionName = aws_lambda_function.fn["poller"].function_name }
  statistic           = "Sum"
  period              = 300
  evaluation_periods  = 1
  comparison_operator = "GreaterThanThreshold"
  threshold           = 1
  treat_missing_data  = "breaching"
  alarm_actions       = var.alarm_actions
  ok_actions          = var.alarm_actions
  tags                = var.tags
}
