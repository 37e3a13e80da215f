// The numbered migrations as databases migrated before schema_migrations kept checksums (ADR 0032) applied them:
// name -> sha256 of the file (src/db/migrate.ts checksumOf). Their rows have no checksum; the migrator accepts such a
// row only while its file is the text listed here, and records it. The files of 0001 to 0018 were rewritten once, when
// their function bodies moved to migrations/functions/ (the schema they build is the same, test/db/schema.test.ts);
// the comment gives the first 16 hex digits of each file as it was at 3d04e30, before that rewrite. Never edit this
// table: a change to an applied migration goes in a new migration.
export const UNRECORDED_CHECKSUMS: Readonly<Record<string, string>> = {
  '0001_ledger': 'ccce0a62b25845bf7a307d03881cdf763d5979b8443df19a1c671ef403702a40', // at 3d04e30: 1d2a5cea75995434
  '0002_booking': '936676d5ba82e5da182f598a97541813d5a7e9aab56248afee27a0c2d34e4479', // at 3d04e30: 8ef3f3ec744f6ff3
  '0003_capacity_rollup': '3e6048f6c554e5419551376aebcc1d6af738e593e987d3ac3672679225580829', // at 3d04e30: a9e3335f7a87619f
  '0004_leader_fence': '8ae001f7a956b132a968ae758f19aa69a5e97407a859535ea757d3857e8ceea0', // at 3d04e30: 240db72364a65123
  '0005_pod_assignments': 'd6435c45c56c1dda90712db05cf5f6e3ad7cefd8e038d364580cd9a4a28d3570', // at 3d04e30: d6435c45c56c1dda
  '0006_extender_notify': 'bec428f230ea4991e484fc747ade22058ed91f90c60630596e1e81bd962138ca', // at 3d04e30: fd3b1f1c0a8260dd
  '0007_placer': '4d81d0e447ed6954be2ebec0776ba55701c424c70e4e88bf451a2a382592b97d', // at 3d04e30: 24b37061f8e67290
  '0008_usage': '046090ab76e47460835dc82a5fff8594713822684155de7210dbdf09237f7a95', // at 3d04e30: d490697feacb7c57
  '0009_quota_budget': 'af1e072d5a363d7d77aec7e81fd571830b99b98d365a9de25b73118f1d1e6d70', // at 3d04e30: 1db6a3be303cda8d
  '0010_repair': '59736e85cfc9728e22161f2c34a301da22cd52ff00bffeb11d04e39602e5dd8c', // at 3d04e30: 9d9929d23dd04041
  '0011_spot': '8ca562a2e6e7d22cf064589d75471bbddd1ed9eb4c82d4b35c407c199f43dcff', // at 3d04e30: 7bea47fda7fa1c21
  '0012_repair_victims': '42c1fb133f7c97210707b6ec28e0e8d59c9572343aa31254f22c96d04cf0fe6f', // at 3d04e30: a25ab5ecfd54bfc4
  '0013_one_release': '03d73a3c2ec974fbcd119865bc5a1fd46413b2c07b3849d5f1119a0ea6f5f5cf', // at 3d04e30: 592b3b7db4a60de1
  '0014_bind_admission': '955824b0328817b1e0629289045341796d24a08e4956669960f58f89b2af6321', // at 3d04e30: 610d764c2d28eca5
  '0015_quota_refresh_clock': 'f11d1a311daeaefc85209978738d003673315a9819a53803dbd9563da6ce46d9', // at 3d04e30: 832f0607cf2e05c5
  '0016_extender_notify_xact': 'f8e6b2135f7546ade1e8f6facbd02bc1731310c2f5e2fd7d3923d7d75af39968', // at 3d04e30: 0a7c018112362be7
  '0017_placer_plans': '0ecc6d0b0f7bc8333f49c9b5fa76149bf154131b30c0a3e3629602826e74d308', // at 3d04e30: eeaf54da27ec3f27
  '0018_stop_grace': 'e5e39e5de0a355c9ba084b97d8210a12a3e33a4d82cbd75fad4dc532346279cb', // at 3d04e30: e5e39e5de0a355c9
};
