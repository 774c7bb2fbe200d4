# A complete deployment of punctual with the module's defaults: prefix punctual-, a module-made
# KMS key, alarms to an SNS topic. Build the artifacts first (docs/DEPLOY.md), then:
#
#   terraform init && terraform apply -var artifacts_dir=../../../../target/lambda
#
# and run `punctual init` once with the printed command.

terraform {
  required_version = ">= 1.5.0"

  required_providers {
    aws = {
      source  = "hashicorp/aws"
      version = ">= 5.40"
    }
  }
}

provider "aws" {
  region = var.region
}

variable "region" {
  description = "AWS region to deploy to."
  type        = string
  default     = "us-east-1"
}

variable "artifacts_dir" {
  description = "Directory of the Lambda zips (cargo lambda build --lambda-dir)."
  type        = string
  default     = "../../../../target/lambda"
}

variable "api_keys_json" {
  description = "API keys as a JSON key file with SHA-256 digests (see the module README)."
  type        = string
  sensitive   = true
}

variable "webhook_secret" {
  description = "Webhook signing secret."
  type        = string
  sensitive   = true
}

variable "session_secret" {
  description = "Console session secret (at least 16 bytes)."
  type        = string
  sensitive   = true
}

resource "aws_sns_topic" "alarms" {
  name              = "punctual-alarms"
  kms_master_key_id = "alias/aws/sns"
}

module "punctual" {
  source = "../.."

  artifacts_dir  = var.artifacts_dir
  api_keys_json  = var.api_keys_json
  webhook_secret = var.webhook_secret
  session_secret = var.session_secret
  alarm_actions  = [aws_sns_topic.alarms.arn]

  tags = {
    app = "punctual"
  }
}

output "api_url" {
  description = "The API and console."
  value       = module.punctual.api_url
}

output "init_command" {
  description = "Run once after the first apply."
  value       = module.punctual.init_command
}
