// The numbered migrations as databases migrated before schema_migrations kept checksums (ADR 0032) applied them:
// name -> sha256 of the file (src/db/migrate.ts checksumOf). Their rows have no checksum; the migrator accepts such a
// row only while its file is the text listed here, and records it. The files of 0001 to 0018 were rewritten once, when
// their function bodies moved to migrations/functions/ (the schema they build is the same, test/db/schema.test.ts);
// the comment gives the first 16 hex digits of each file as it was at 3d04e30, before that rewrite. Never edit this
// table: a change to an applied migration goes in a new migration.
export const UNRECORDED_CHECKSUMS: Readonly<Record<string, string>> = {
  '0001_ledger': '461d73e38cf6afe227d4d8857fdb4552ffcc05017dfdfbdc0b8984502b3bab8a', // at 3d04e30: 1d2a5cea75995434
  '0002_booking': 'cd73bb8f7bcaf5383c19242ed7ec09c20fe8d95872955f3a1adec5e8e1e497ed', // at 3d04e30: 8ef3f3ec744f6ff3
  '0003_capacity_rollup': '51ac2e574d8687b9d3f911a89d0d1c45481b95ca6019a8c90bd9c64778151a74', // at 3d04e30: a9e3335f7a87619f
  '0004_leader_fence': '0e24dc617c8a18f1d4114ced658852b5031722da9ef28cb61a2561289725d93f', // at 3d04e30: 240db72364a65123
  '0005_pod_assignments': 'd6435c45c56c1dda90712db05cf5f6e3ad7cefd8e038d364580cd9a4a28d3570', // at 3d04e30: d6435c45c56c1dda
  '0006_extender_notify': '42f96a066acb6826cec2b1842d187ba2920be949ca2462d5a9ee734638ea3041', // at 3d04e30: fd3b1f1c0a8260dd
  '0007_placer': 'a9255ada2b1439e9395d7018c0b37f171774417041ee8eb4cbd0519991cf6e63', // at 3d04e30: 24b37061f8e67290
  '0008_usage': 'e4235a5f4f0f11d7e6b1bbb7580561f4ed6b9d93664117354c5e09a99a5e4cea', // at 3d04e30: d490697feacb7c57
  '0009_quota_budget': 'a9a0fced6fb9c6e350a0993e7b21c53e25ffc46e43ffd5b8395ceef0fde1a530', // at 3d04e30: 1db6a3be303cda8d
  '0010_repair': '7f423ba0b8b546d911bc60eee50aa89fd2363865ec7ba8075c41c7b8d57ba354', // at 3d04e30: 9d9929d23dd04041
  '0011_spot': 'cec05b3100e7d3baf64526321a7612349ad56f4c64143ada4b6b6693f904a367', // at 3d04e30: 7bea47fda7fa1c21
  '0012_repair_victims': '5d876ebf2b2e76e7822385c0a821d98e9fb066800c2fb00405b8c30b6a839793', // at 3d04e30: a25ab5ecfd54bfc4
  '0013_one_release': '2a26f9dd170238d429b845df94e8c000b198ef858e36ebc65872cc6d6ffafeca', // at 3d04e30: 592b3b7db4a60de1
  '0014_bind_admission': '1496b3d7da1963f18a94ab3f32776c00375a630223a4264cdeea326323f5bc6a', // at 3d04e30: 610d764c2d28eca5
  '0015_quota_refresh_clock': '0770f3410700740d2c5a8dca6ced3f1e1b5789e7d852e6b5304b296021eecb61', // at 3d04e30: 832f0607cf2e05c5
  '0016_extender_notify_xact': '10618ad084fbe1d521258dac410ed60b5c3f1faee5eea7642593916d61756aee', // at 3d04e30: 0a7c018112362be7
  '0017_placer_plans': '11b8c8ba639b079c5d129e0abfbbabaed41888768a6cc0c53b7374b2aeca54fe', // at 3d04e30: eeaf54da27ec3f27
  '0018_stop_grace': 'e5e39e5de0a355c9ba084b97d8210a12a3e33a4d82cbd75fad4dc532346279cb', // at 3d04e30: e5e39e5de0a355c9
};
