"""Print where `cdk synth` wrote the templates and what they contain."""

from __future__ import annotations

import json
import sys
from collections import Counter
from pathlib import Path

# Resource types worth naming in the summary line of a stack.
HIGHLIGHTS = (
    "AWS::EC2::VPC",
    "AWS::EC2::Subnet",
    "AWS::EC2::NatGateway",
    "AWS::EC2::VPCEndpoint",
    "AWS::FSx::FileSystem",
    "AWS::S3::Bucket",
    "AWS::EKS::Cluster",
    "AWS::EKS::Addon",
    "AWS::SageMaker::Cluster",
    "AWS::IAM::Role",
    "AWS::KMS::Key",
)


def main(outdir: str) -> int:
    root = Path(outdir)
    manifest = json.loads((root / "manifest.json").read_text())
    stacks = [
        (name, artifact)
        for name, artifact in manifest["artifacts"].items()
        if artifact["type"] == "aws:cloudformation:stack"
    ]
    print(f"Templates in {root.resolve()}:")
    for _, artifact in sorted(stacks):
        path = root / artifact["properties"]["templateFile"]
        resources = json.loads(path.read_text()).get("Resources", {})
        counts = Counter(r["Type"] for r in resources.values())
        shown = ", ".join(f"{counts[t]} {t.split('::')[-1]}" for t in HIGHLIGHTS if counts.get(t))
        print(f"  {path.name}: {len(resources)} resources ({artifact['environment']})")
        if shown:
            print(f"      {shown}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1] if len(sys.argv) > 1 else "cdk.out"))
