"""What AWS offers where, as far as config validation needs it: the Availability Zone letters
of each Region, the interface endpoint services and CloudWatch Logs' retention periods. Pure data (no AWS calls, no CDK import):
the schema checks environment files against it before synth.
"""

from __future__ import annotations

from collections.abc import Mapping

# CloudWatch Logs accepts only these retention periods (days).
LOG_RETENTION_DAYS: tuple[int, ...] = (
    1, 3, 5, 7, 14, 30, 60, 90, 120, 150, 180, 365, 400, 545, 731, 1096, 1827, 2192, 2557,
    2922, 3288, 3653,
)  # fmt: skip

# AZ letters that exist in each Region (existence only: some AZs cannot host every instance
# type, e.g. us-east-1e, and capacity is the training plans' business). AZ names map to
# physical zones per account, but the set of letters is the Region's: us-west-1 shows each
# account two of a, b and c, ap-northeast-1 shows new accounts a, c and d (its b is closed to
# new accounts), ca-central-1 skips c. Compiled from the AWS "Regions and Availability
# Zones" documentation and the AZ counts it lists; a Region missing here (newer, opt-in,
# China, ISO) is not checked: add it with the letters
# `aws ec2 describe-availability-zones --region <region>` lists.
AZ_LETTERS: Mapping[str, str] = {
    "us-east-1": "abcdef",
    "us-east-2": "abc",
    "us-west-1": "abc",
    "us-west-2": "abcd",
    "ca-central-1": "abd",
    "sa-east-1": "abc",
    "eu-west-1": "abc",
    "eu-west-2": "abc",
    "eu-west-3": "abc",
    "eu-central-1": "abc",
    "eu-north-1": "abc",
    "eu-south-1": "abc",
    "ap-northeast-1": "acd",
    "ap-northeast-2": "abcd",
    "ap-northeast-3": "abc",
    "ap-south-1": "abc",
    "ap-southeast-1": "abc",
    "ap-southeast-2": "abc",
    "ap-east-1": "abc",
    "me-south-1": "abc",
    "af-south-1": "abc",
    "us-gov-west-1": "abc",
    "us-gov-east-1": "abc",
}


def availability_zones(region: str) -> tuple[str, ...] | None:
    """Every AZ name of `region` (us-east-2 -> us-east-2a, us-east-2b, us-east-2c), or None
    when the Region is not in the table (its AZs are then not checked)."""
    letters = AZ_LETTERS.get(region)
    return None if letters is None else tuple(f"{region}{letter}" for letter in letters)


# AZ IDs of each Region in the table above: the Region's ID prefix and the numbers of its
# zones, from the "AWS Availability Zones" tables of the AWS Regions and Availability Zones
# guide (an ID is the Region's short code, "-az" and a number, the same physical zone in every
# account). Zones closed to newer accounts keep their IDs (usw1-az2, cac1-az3, apne1-az3):
# older accounts still see them, and they must be recognised to be refused where needed.
_ZONE_ID_NUMBERS: Mapping[str, tuple[str, str]] = {
    "us-east-1": ("use1", "123456"),
    "us-east-2": ("use2", "123"),
    "us-west-1": ("usw1", "123"),
    "us-west-2": ("usw2", "1234"),
    "ca-central-1": ("cac1", "1234"),
    "sa-east-1": ("sae1", "123"),
    "eu-west-1": ("euw1", "123"),
    "eu-west-2": ("euw2", "123"),
    "eu-west-3": ("euw3", "123"),
    "eu-central-1": ("euc1", "123"),
    "eu-north-1": ("eun1", "123"),
    "eu-south-1": ("eus1", "123"),
    "ap-northeast-1": ("apne1", "1234"),
    "ap-northeast-2": ("apne2", "1234"),
    "ap-northeast-3": ("apne3", "123"),
    "ap-south-1": ("aps1", "123"),
    "ap-southeast-1": ("apse1", "123"),
    "ap-southeast-2": ("apse2", "123"),
    "ap-east-1": ("ape1", "123"),
    "me-south-1": ("mes1", "123"),
    "af-south-1": ("afs1", "123"),
    "us-gov-west-1": ("usgw1", "123"),
    "us-gov-east-1": ("usge1", "123"),
}

# Zone IDs where EKS does not place control-plane network interfaces: a cluster with a subnet
# there fails with UnsupportedAvailabilityZoneException (Amazon EKS User Guide, "View Amazon
# EKS networking requirements for VPC and subnets", subnet requirements for clusters).
EKS_UNSUPPORTED_ZONE_IDS: frozenset[str] = frozenset({"use1-az3", "usw1-az2", "cac1-az3"})


def zone_ids(region: str) -> tuple[str, ...] | None:
    """Every AZ ID of `region` (us-east-2 -> use2-az1, use2-az2, use2-az3), or None when the
    Region is not in the table (its IDs are then not checked)."""
    entry = _ZONE_ID_NUMBERS.get(region)
    if entry is None:
        return None
    prefix, numbers = entry
    return tuple(f"{prefix}-az{number}" for number in numbers)


# Interface endpoint services, as written after "com.amazonaws.<region>.": every service
# aws-cdk-lib 2.275.0 names in `ec2.InterfaceVpcEndpointAwsService` with that prefix (the
# class platform_constructs/network.py creates the endpoints with). Services under other
# prefixes (aws.sagemaker.<region>.notebook, global ones such as com.amazonaws.iam) cannot be
# created that way and are left out. Not every service exists in every Region.
INTERFACE_ENDPOINT_SERVICES: frozenset[str] = frozenset(
    """
    access-analyzer account acm acm-fips acm-pca acm-pca-fips airflow.api airflow.api-fips
    airflow.env airflow.env-fips airflow.ops analytics-omics app-integrations appconfig
    appconfigdata application-autoscaling application-signals applicationinsights appmesh
    appmesh-envoy-management apprunner apprunner.requests appstream.api appstream.streaming
    appsync-api apptest aps aps-workspaces arsenal-discovery athena auditmanager autoscaling
    autoscaling-plans awsconnector b2bi backup backup-gateway batch bcm-pricing-calculator
    bedrock bedrock-agent bedrock-agent-runtime bedrock-agentcore bedrock-agentcore.gateway
    bedrock-data-automation bedrock-data-automation-fips bedrock-data-automation-runtime
    bedrock-data-automation-runtime-fips bedrock-fips bedrock-runtime bedrock-runtime-fips
    billing billingconductor braket cases ce cleanrooms cleanrooms-ml cloudcontrolapi
    cloudcontrolapi-fips clouddirectory cloudformation cloudhsmv2 cloudtrail
    codeartifact.api codeartifact.repositories codebuild codebuild-fips codecatalyst.git
    codecatalyst.packages codecommit codecommit-fips codeconnections.api codedeploy
    codedeploy-commands-secure codeguru-profiler codeguru-reviewer codepipeline
    codestar-connections.api codewhisperer cognito-identity cognito-identity-fips
    cognito-idp cognito-idp-fips comprehend comprehendmedical compute-optimizer config
    connect-campaigns console control-storage-omics controlcatalog cost-optimization-hub
    data-servicediscovery data-servicediscovery-fips databrew dataexchange datasync datazone
    deadline.management deadline.scheduling deviceadvisor.iot devops-guru
    dicom-medical-imaging discovery dms dms-fips drs ds ds-data dsql dynamodb dynamodb-fips
    dynamodb-streams ebs ec2 ec2messages ecr-public.api ecr.api ecr.dkr ecs ecs-agent
    ecs-telemetry eks eks-auth eks-proxy elastic-inference.runtime elasticache
    elasticache-fips elasticbeanstalk elasticbeanstalk-health elasticfilesystem
    elasticfilesystem-fips elasticloadbalancing elasticmapreduce email email-fips email-smtp
    emr-containers emr-serverless emr-serverless-services.livy emr-serverless.dashboard
    emrwal.prod entityresolution events evidently evidently-dataplane execute-api finspace
    finspace-api fis forecast forecast-fips forecastquery forecastquery-fips frauddetector
    fsx fsx-fips geo.geofencing geo.maps geo.metadata geo.places geo.routes geo.tracking
    git-codecommit git-codecommit-fips glue glue.dashboard grafana grafana-workspace
    greengrass groundstation guardduty guardduty-data guardduty-data-fips guardduty-fips
    healthlake identitystore imagebuilder inspector-scan inspector2 internetmonitor
    internetmonitor-fips invoicing iot.credentials iot.data iot.fleethub.api iotfleetwise
    iotroborunner iotsitewise.api iotsitewise.data iottwinmaker.api iottwinmaker.data
    iotwireless.api kafka kafka-fips kafkaconnect kendra kinesis-firehose kinesis-streams
    kinesis-streams-fips kms kms-fips lakeformation lambda launchwizard license-manager
    license-manager-fips license-manager-linux-subscriptions
    license-manager-linux-subscriptions-fips license-manager-user-subscriptions logs
    lookoutequipment lookoutmetrics lookoutvision lorawan.cups lorawan.lns m2 macie2
    mail-manager mail-manager-fips managedblockchain-query managedblockchain.bitcoin.mainnet
    managedblockchain.bitcoin.testnet mediaconnect medical-imaging memory-db memorydb-fips
    mgn migrationhub-orchestrator migrationhub-strategy models-v2-lex monitoring mq
    neptune-graph neptune-graph-data neptune-graph-fips network-firewall
    network-firewall-fips networkflowmonitor networkflowmonitorreports networkmonitor nimble
    observabilityadmin organizations organizations-fips outposts panorama
    payment-cryptography.controlplane payment-cryptography.dataplane pca-connector-ad
    pca-connector-scep pcs pcs-fips personalize personalize-events personalize-runtime pi
    pi-fips pinpoint pinpoint-sms-voice-v2 pipes pipes-data pipes-fips polly pricing.api
    private-networks profile proton q qapps qldb.session quicksight-website ram rbin rds
    rds-data redshift redshift-data redshift-data-fips redshift-fips redshift-serverless
    redshift-serverless-fips refactor-spaces rekognition rekognition-fips repostspace
    resource-groups resource-groups-fips robomaker rolesanywhere rum rum-dataplane
    runtime-medical-imaging runtime-v2-lex s3 s3-outposts s3tables s3vectors
    sagemaker-data-science-assistant sagemaker-geospatial sagemaker.api sagemaker.api-fips
    sagemaker.featurestore-runtime sagemaker.metrics sagemaker.runtime
    sagemaker.runtime-fips schemas scn secretsmanager securityhub securitylake
    securitylake-fips serverlessrepo service.user-subscriptions servicecatalog
    servicecatalog-appregistry servicediscovery servicediscovery-fips shield shield-fips
    signin simspaceweaver sms sms-fips snow-device-management sns social-messaging sqs
    sqs-fips ssm ssm-contacts ssm-fips ssm-incidents ssm-quicksetup ssmmessages states
    storage-omics storagegateway streaming-rekognition streaming-rekognition-fips sts
    sts-fips swf swf-fips sync-states synthetics synthetics-fips tagging tags-omics tax
    textract textract-fips thinclient.api timestream-influxdb timestream-influxdb-fips tnb
    transcribe transcribestreaming transfer transfer.server translate trustedadvisor
    verifiedpermissions voiceid vpc-lattice wafv2 wafv2-fips wellarchitected wisdom
    workflows-omics workmail workspaces workspaces-web workspaces-web-fips xray
    """.split()  # noqa: SIM905 - a list literal would take 376 lines
)
