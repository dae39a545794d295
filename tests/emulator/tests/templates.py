"""CloudFormation templates shaped like kfaws' own stacks, built as Python dicts."""

from __future__ import annotations

import json

ASSUME_EKS = {
    "Version": "2012-10-17",
    "Statement": [
        {"Effect": "Allow", "Principal": {"Service": "eks.amazonaws.com"}, "Action": "sts:AssumeRole"}
    ],
}


def network(cidr: str = "10.0.0.0/16") -> str:
    """VPC, a public and a private subnet, IGW, NAT gateway, route tables, S3 gateway endpoint, SG."""
    prefix = cidr.split(".")[0] + "." + cidr.split(".")[1]
    ref = lambda name: {"Ref": name}  # noqa: E731
    return json.dumps(
        {
            "Resources": {
                "Vpc": {"Type": "AWS::EC2::VPC", "Properties": {"CidrBlock": cidr}},
                "PublicSubnet": {
                    "Type": "AWS::EC2::Subnet",
                    "Properties": {"VpcId": ref("Vpc"), "CidrBlock": f"{prefix}.0.0/24", "AvailabilityZone": "us-east-1a"},
                },
                "PrivateSubnet": {
                    "Type": "AWS::EC2::Subnet",
                    "Properties": {"VpcId": ref("Vpc"), "CidrBlock": f"{prefix}.1.0/24", "AvailabilityZone": "us-east-1b"},
                },
                "Igw": {"Type": "AWS::EC2::InternetGateway"},
                "IgwAttachment": {
                    "Type": "AWS::EC2::VPCGatewayAttachment",
                    "Properties": {"VpcId": ref("Vpc"), "InternetGatewayId": ref("Igw")},
                },
                "PublicRouteTable": {"Type": "AWS::EC2::RouteTable", "Properties": {"VpcId": ref("Vpc")}},
                "PublicDefaultRoute": {
                    "Type": "AWS::EC2::Route",
                    "DependsOn": "IgwAttachment",
                    "Properties": {
                        "RouteTableId": ref("PublicRouteTable"),
                        "DestinationCidrBlock": "0.0.0.0/0",
                        "GatewayId": ref("Igw"),
                    },
                },
                "PublicAssociation": {
                    "Type": "AWS::EC2::SubnetRouteTableAssociation",
                    "Properties": {"SubnetId": ref("PublicSubnet"), "RouteTableId": ref("PublicRouteTable")},
                },
                "NatEip": {"Type": "AWS::EC2::EIP", "Properties": {"Domain": "vpc"}},
                "Nat": {
                    "Type": "AWS::EC2::NatGateway",
                    "Properties": {
                        "SubnetId": ref("PublicSubnet"),
                        "AllocationId": {"Fn::GetAtt": ["NatEip", "AllocationId"]},
                    },
                },
                "PrivateRouteTable": {"Type": "AWS::EC2::RouteTable", "Properties": {"VpcId": ref("Vpc")}},
                "PrivateDefaultRoute": {
                    "Type": "AWS::EC2::Route",
                    "Properties": {
                        "RouteTableId": ref("PrivateRouteTable"),
                        "DestinationCidrBlock": "0.0.0.0/0",
                        "NatGatewayId": ref("Nat"),
                    },
                },
                "PrivateAssociation": {
                    "Type": "AWS::EC2::SubnetRouteTableAssociation",
                    "Properties": {"SubnetId": ref("PrivateSubnet"), "RouteTableId": ref("PrivateRouteTable")},
                },
                "S3Endpoint": {
                    "Type": "AWS::EC2::VPCEndpoint",
                    "Properties": {
                        "VpcId": ref("Vpc"),
                        "ServiceName": "com.amazonaws.us-east-1.s3",
                        "VpcEndpointType": "Gateway",
                        "RouteTableIds": [ref("PrivateRouteTable")],
                    },
                },
                "NfsSecurityGroup": {
                    "Type": "AWS::EC2::SecurityGroup",
                    "Properties": {
                        "GroupDescription": "NFS from the VPC",
                        "VpcId": ref("Vpc"),
                        "SecurityGroupIngress": [
                            {"IpProtocol": "tcp", "FromPort": 2049, "ToPort": 2049, "CidrIp": cidr}
                        ],
                    },
                },
            },
            "Outputs": {"VpcId": {"Value": ref("Vpc")}},
        }
    )
