"""`hpctl preflight --env NAME`: check the AWS account an environment deploys into, before
`cdk deploy` finds out the hard way. Read-only: every call is a Describe/Get/List.

The credentials are checked first (`hpctl.aws.connect`, sts:GetCallerIdentity): without
them, or with another account's, the command ends with one line and checks nothing. Then one
table, one row per thing checked (check, subject, status, detail, fix), status `ok`,
`problem`, `warning` or `skipped`; exit 1 when any row is a problem (a warning: deploying
works, but someone outside the platform will notice). An AWS failure on one call (access
denied, throttling after the client's retries, credentials that expire meanwhile) turns that
row into a problem naming the error code and the IAM action it needs, and every other check
still runs.

Layout: `context` (the row, the shared `CheckContext` of config and clients, failure rows),
one module per check (a function of the context returning its rows), `registry` (the checks
in table order and the runner); the command (table and JSON) is `hpctl.preflight_cmd`.

The checks, in table order (IAM actions in brackets):

- training-plan [sagemaker:DescribeTrainingPlan]: per instance group with a plan, the plan
  (looked up by the name in its ARN) exists with that ARN, is Active or Scheduled, targets
  HyperPod clusters, ends more than `PLAN_MIN_REMAINING` (7 days) from now, and reserves the
  group's instance type in the group's `training_plan.availability_zone`, at least `count`
  instances at once (groups of one type on one plan are counted together; reservations
  that follow each other in time do not add up). A plan that ends within 7 days is a problem, not a warning: the nodes
  leave when it ends, so extend it or buy the next plan first.
- quota [servicequotas:ListServiceQuotas, servicequotas:GetServiceQuota, and only when the
  applied value is missing servicequotas:ListAWSDefaultServiceQuotas /
  servicequotas:GetAWSDefaultServiceQuota]: SageMaker "<type> for cluster usage" (found by
  name) for the summed count of the groups without a training plan; groups with a plan are
  reported ok without quota (the plan holds their capacity; the training-plan row checks it).
  EKS clusters, VPCs per Region, IPv4 CIDR blocks per VPC (only with network.cluster_cidr),
  EC2-VPC Elastic IPs (one per NAT gateway, only with NAT) and FSx for Lustre Persistent_2 storage capacity
  (found by quota code). Every quota is compared with what this environment alone needs:
  Service Quotas does not report current usage, so an account that already uses part of a
  quota can pass here and still hit it on deploy.
- availability-zone [ec2:DescribeAvailabilityZones]: every network.availability_zones entry
  exists in the Region for this account and is available, and its zone ID is the one
  cdk.context.json records for it (names map to different physical zones in different
  accounts; zones written by ID were placed by that record). HyperPod has no API that says which
  ml.* instance types a zone offers, so on-demand groups are not checked per zone; only
  plan-backed groups are tied to a zone (the training-plan row).
- admin-role [iam:GetRole]: each eks.admin_role_arns role exists with exactly that ARN
  (path included); roles of another account are skipped (this account cannot read them).
- image [ecr:DescribeImages]: each eks.image_overrides image in this account's ECR in the
  environment's Region has its repository and tag (or digest); other images are skipped.
- kubernetes-version [eks:DescribeClusterVersions]: eks.kubernetes_version is in EKS standard
  support. Extended support is a problem (EKS bills it at a higher hourly rate and ends it on a
  fixed date); unsupported or unknown versions are problems.
- bucket-key [cloudformation:DescribeStacks, s3:ListBucket]: only with an empty
  storage.buckets.key_user_arns: the deployed storage stack's data bucket (its
  `DataBucketName` output) is listed for one object; one there is a warning (exit 0): the
  bucket key admits only the environment's roles and FSx, so outside readers get
  AccessDenied on objects written after the deploy. No stack yet: skipped.
"""
