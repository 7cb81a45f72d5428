.module 1.0 features=none
.kernel "same_box" kind=vector ub=4096
  .param "x" f32 in dims=[64,16]
  .param "y" f32 out dims=[4,16]
  .body grid=16,1,1
    load dt=f32 pad=fill buf=0 row_dim=- col_dim=- ub=0 pitch=16 rows=4 cols=16 row_total=4 col_total=16 padv=0.0 base=0 step0=64 step1=0 step2=0 row_stride=16 col_stride=1
    store dt=f32 buf=1 row_dim=- col_dim=- ub=0 pitch=16 rows=4 cols=16 row_total=4 col_total=16 base=0 step0=0 step1=0 step2=0 row_stride=16 col_stride=1
    end
.end
